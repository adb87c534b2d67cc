"""Latency percentiles of the streamed answers, per upstream (`plumbline report health`).

Only a stream measures its time to first token and its time per output token: a whole answer's
TTFT is its end-to-end time and it has no TPOT, so whole answers never enter these percentiles
(the console's traffic panel keeps the same rule, gateway/edge/console/panels.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gateway.ledger.rows import REQUESTS

LATENCY_ROWS = 50_000  # the newest streamed rows read per report


@dataclass(frozen=True, slots=True)
class Latency:
    """Nearest-rank percentiles (seconds) of one upstream's streamed, successful answers."""

    streams: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    tpot_p50_s: float | None
    tpot_p95_s: float | None


def nearest_rank(values: list[float], p: float) -> float | None:
    """The p-th percentile as a value some request actually saw; None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def tpot(e2e: float | None, ttft: float | None, tokens: int) -> float | None:
    """Time per output token after the first (None where it cannot be known)."""
    if e2e is None or ttft is None or tokens < 2:
        return None
    return max(0.0, e2e - ttft) / (tokens - 1)


def streamed_latency(conn: Any, since: float, until: float) -> dict[str, Latency]:
    """Per upstream, TTFT and TPOT p50/p95 of its streamed, successful answers in the window."""
    t = REQUESTS
    query = (
        sa.select(t.c.upstream, t.c.ttft_s, t.c.e2e_s, t.c.completion_tokens)
        .where(
            t.c.time >= since,
            t.c.time < until,
            t.c.stream == sa.true(),
            t.c.status == 200,
            t.c.error_class.is_(None),
            t.c.upstream.is_not(None),
        )
        .order_by(t.c.time.desc())
        .limit(LATENCY_ROWS)
    )
    seen: dict[str, list[tuple[float | None, float | None, int]]] = {}
    for upstream, ttft, e2e, tokens in conn.execute(query):
        seen.setdefault(upstream, []).append((ttft, e2e, int(tokens or 0)))
    out = {}
    for upstream, rows in seen.items():
        ttfts = [r[0] for r in rows if r[0] is not None]
        tpots = [v for ttft, e2e, k in rows if (v := tpot(e2e, ttft, k)) is not None]
        out[upstream] = Latency(
            streams=len(rows),
            ttft_p50_s=nearest_rank(ttfts, 50),
            ttft_p95_s=nearest_rank(ttfts, 95),
            tpot_p50_s=nearest_rank(tpots, 50),
            tpot_p95_s=nearest_rank(tpots, 95),
        )
    return out


def ms_pair(low: float | None, high: float | None) -> str:
    """Two latencies in milliseconds, `p50/p95`; a dash for none."""
    if low is None or high is None:
        return "–"
    return f"{1000 * low:.1f}/{1000 * high:.1f}"
