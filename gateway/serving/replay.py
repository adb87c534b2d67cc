"""One whole request sent to a named upstream outside the route: what the shadow mirror uses.

`replay` says the body as that upstream can serve it (gateway/serving/adapt.py, marked on the
record), sends it unstreamed over the gateway's wire, and returns the answer's body as the taps
account it (usage, reasoning split) with the record's usage set. It raises what an attempt
raises (`Unfit`, `AttemptError`, `MalformedStream`, `OSError`); the caller bounds its time.
"""

from __future__ import annotations

from typing import Any

from gateway.config import Config, Upstream
from gateway.ledger.record import Record
from gateway.serving.accounting import tap_body
from gateway.serving.adapt import adapt_body
from gateway.serving.upstream import body_for, post
from gateway.serving.wire import Wire

__all__ = ["Wire", "replay"]


async def replay(
    config: Config,
    wire: Wire,
    model: str,
    upstream: Upstream,
    path: str,
    body: dict[str, Any],
    record: Record,
) -> bytes:
    """Send `body` (asked of `model`) to `upstream` and return its accounted answer body."""
    adapted = adapt_body(config, model, body, upstream)
    adapted.mark(record)
    cap = config.thinking_cap(upstream)
    data = body_for(upstream, adapted.body, False, False, cap, adapted.require)
    resp = await post(wire, upstream, path, data)
    try:
        raw = await resp.read()
    finally:
        resp.release()
    return tap_body(record, raw, split_think=upstream.reasoning == "gateway")
