"""Bounded label values for the metrics (`gateway.ledger.metrics`): a configured name, the
first few new ones, then "other"; so a typo'd model name cannot mint a series.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.config import Config
from gateway.ledger.record import Record

OTHER = "other"
NONE = "none"
_CLEAN = re.compile(r"[^a-z0-9_.:/-]+")


class Bounded:
    """A label value set: the known names, then the first `extra` new ones, then "other"."""

    def __init__(self, known: Iterable[str], extra: int = 0) -> None:
        self._allowed = set(known)
        self._extra = extra

    def __call__(self, value: str | None) -> str:
        if value is None:
            return NONE
        if value in self._allowed:
            return value
        clean = _CLEAN.sub("_", value.strip().lower())[:64]
        if clean in self._allowed:
            return clean
        if self._extra > 0 and clean:
            self._extra -= 1
            self._allowed.add(clean)
            return clean
        return OTHER


def outcome(record: Record) -> str:
    """ok | client_error (4xx) | error (anything else that failed)."""
    if record.error_class is None and 0 < record.status < 400:
        return "ok"
    if 400 <= record.status < 500:
        return "client_error"
    return "error"


def configured_providers(config: Config) -> set[str]:
    names: set[str] = set()
    for u in config.upstreams:
        if u.provider is not None:
            for group in (u.provider.order, u.provider.only):
                names.update(_CLEAN.sub("_", p.lower()) for p in group or ())
    return names
