"""Dropped fields: what a front door (or adapt) removed before the upstream, marked.

A field the gateway cannot serve is removed and named: in the ``x-plumbline-dropped`` answer
header, on the request's record (``dropped``) and in ``gateway_dropped_fields_total``. The doors'
field policy (`gateway/edge/doors/policy.py`) decides what is dropped; this is the marking, which
serving does too (adapt strips what an upstream cannot take; the relay says it in the header).
"""

from __future__ import annotations

from gateway.ledger.record import Record

HEADER = "x-plumbline-dropped"


def mark_dropped(record: Record, *names: str) -> None:
    """Note on `record` that the door dropped `names` (each once, in the order met)."""
    have = record.dropped.split(",") if record.dropped else []
    for name in names:
        if name not in have:
            have.append(name)
    record.dropped = ",".join(have) or None
