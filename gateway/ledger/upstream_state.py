"""An upstream's state from its errors: `failing`, `degraded` or `ok`, one rule for every view.

An upstream's calls are the requests it answered without an error plus its failed calls
(connection refused, timeout, 5xx, a malformed answer, a 200 that is an error; not a request's
own 4xx, not a client leaving: `health_report.failed_attempts`). Its error rate is failed calls
over calls, and its state:

    failing     error rate >= FAILING_RATE (half its calls or more failed)
    degraded    error rate >= DEGRADED_RATE (one call in twenty or more failed)
    ok          below that
    no traffic  no call at all in the window

`/health` reads it from the records of the last `LIVE_WINDOW_S` seconds this process finished
(`UpstreamErrors`, a record sink); `plumbline report health`, the console's Upstreams panel and
the `Upstream state` Grafana panel from the store or the metrics over their own window, with the
same thresholds (docs/ledger.md).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from gateway.ledger.record import Record

FAILING_RATE = 0.5
DEGRADED_RATE = 0.05
LIVE_WINDOW_S = 900.0
NOT_FAILURES = frozenset({"ok", "cancelled"})


def error_rate(answered: int, failed: int) -> float | None:
    calls = answered + failed
    return failed / calls if calls else None


def state_of(answered: int, failed: int) -> str:
    rate = error_rate(answered, failed)
    if rate is None:
        return "no traffic"
    if rate >= FAILING_RATE:
        return "failing"
    return "degraded" if rate >= DEGRADED_RATE else "ok"


def failed_calls(record: Record) -> list[tuple[str, str]]:
    """(upstream, outcome) of each of the record's failed calls. The last call of a request the
    upstream refused as the request's own fault (a 4xx it answered) is not one."""
    out = []
    last = len(record.attempts) - 1
    for i, a in enumerate(record.attempts):
        if a.outcome in NOT_FAILURES:
            continue
        refused = (
            i == last
            and a.upstream == record.upstream
            and 400 <= record.status < 500
            and a.status is not None
            and 400 <= a.status < 500
        )
        if not refused:
            out.append((a.upstream, a.outcome))
    return out


def answered_ok(record: Record) -> bool:
    return record.upstream is not None and record.error_class is None and record.status < 400


@dataclass(slots=True)
class _Event:
    time: float
    upstream: str
    failed: bool
    outcome: str


class UpstreamErrors:
    """A record sink: each upstream's calls and failed calls over the last `window_s` seconds,
    its last error's class and time, and its state (`state_of`), for `/health`."""

    def __init__(self, upstreams: list[str], window_s: float = LIVE_WINDOW_S, keep: int = 100_000):
        self.upstreams = list(upstreams)
        self.window_s = window_s
        self.events: deque[_Event] = deque(maxlen=keep)
        self.last_error: dict[str, tuple[str, float]] = {}

    def submit(self, record: Record) -> None:
        now = time.time()
        for upstream, outcome in failed_calls(record):
            self.events.append(_Event(now, upstream, True, outcome))
            self.last_error[upstream] = (outcome, now)
        if answered_ok(record):
            self.events.append(_Event(now, record.upstream or "", False, "ok"))

    def snapshot(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        now = time.time() if now is None else now
        while self.events and self.events[0].time < now - self.window_s:
            self.events.popleft()
        counts = {u: [0, 0] for u in self.upstreams}
        for e in self.events:
            counts.setdefault(e.upstream, [0, 0])[e.failed] += 1
        out = {}
        for name, (answered, failed) in counts.items():
            last = self.last_error.get(name)
            out[name] = {
                "state": state_of(answered, failed),
                "calls": answered + failed,
                "failed_calls": failed,
                "error_rate": error_rate(answered, failed),
                "last_error": last[0] if last else None,
                "last_error_time": last[1] if last else None,
                "window_s": self.window_s,
            }
        return out
