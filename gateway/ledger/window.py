"""The window a report or a gauge reads: `--since` parsed, the span up to now, a store opened
for one read, and the usage and economics over the last so many seconds.

Every report renders as a rich table, CSV or JSON (`Format`, the same three for each).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Literal

from gateway.config import Config
from gateway.ledger.cost import ModelEconomics, Usage, economics
from gateway.ledger.store import Store

Format = Literal["table", "csv", "json"]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(text: str) -> float:
    """'90s', '30m', '24h', '7d', '2w' -> seconds."""
    m = _SINCE.match(text.lower())
    if m is None:
        raise ValueError(f"--since {text!r}: expected a number and a unit (s, m, h, d, w)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"--since {text!r}: must be positive")
    return seconds


def window_economics(
    config: Config, store: Store, window_s: float, now: float | None = None, settled: bool = False
) -> tuple[list[Usage], dict[str, float], dict[str, ModelEconomics]]:
    """Usage, node busy hours and per-model economics over the last `window_s` seconds.

    `settled`: over the last `window_s` of rolled-up 5-minute buckets instead (up to SETTLE_S,
    a bucket and a housekeeping tick behind the clock; the exact window when nothing rolls up),
    which the database answers from the rollups alone: what the economics gauges, recomputed
    every minute on every process, read (`gateway.ledger.rollups.settled_span`).
    The gateway can publish the result as gauges: `metrics.set_economics(econ)`.
    """
    now = time.time() if now is None else now
    rolled = store.settled_span(window_s, now) if settled else None
    if rolled is not None:
        usage = store.usage(*rolled)
        hours = store.node_hours(config, *rolled, edges=False)
    else:
        usage = store.usage(now - window_s, now)
        hours = store.node_hours(config, now - window_s, now)
    return usage, hours, economics(config, usage, hours)


def span(since: str, now: float | None = None) -> tuple[float, float]:
    """The window `since` (e.g. "24h") up to `now` (default: the clock), as (start, end)."""
    end = time.time() if now is None else now
    return end - parse_since(since), end


@contextlib.contextmanager
def reading(config: Config, store: Store | None) -> Iterator[Store]:
    """`store`, or the config's own store, opened for one report and closed after it."""
    if store is not None:
        yield store
        return
    own = Store.from_config(config)
    try:
        yield own
    finally:
        own.close()
