"""The console traffic panel's counts from the 5-minute rollups: per model requests and flagged
requests of a lane, and requests per bucket for the rate series. Whole rolled-up buckets come
from `usage_rollup`, the partial ends from raw rows, as `gateway.ledger.rollups` reads usage.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gateway.ledger.queries import count_if
from gateway.ledger.rollup_sql import USAGE, bucket_of
from gateway.ledger.rollups import whole_buckets
from gateway.ledger.rows import REQUESTS
from gateway.ledger.truncation import capped_clause

Counts = tuple[int, int, int, int, int]  # requests, truncated, client-capped, leaked, errors


def _raw_rows(since: float, until: float, lane: str) -> Any:
    t = REQUESTS
    cond = [t.c.time >= since, t.c.time < until]
    return sa.and_(*cond) if lane == "all" else sa.and_(*cond, t.c.lane == lane)


def _spans(conn: Connection, since: float, until: float) -> tuple[Any, list[tuple[float, float]]]:
    """The rolled-up buckets [a, b) (or None) and the raw spans around them."""
    whole = whole_buckets(conn, since, until)
    if whole is None:
        return None, [(since, until)]
    spans = [(since, float(whole[0])), (float(whole[1]), until)]
    return whole, [(lo, hi) for lo, hi in spans if hi > lo]


def model_counts(conn: Connection, since: float, until: float, lane: str) -> dict[str, Counts]:
    """Per model: (requests, truncated, stopped at the client's cap, leaked, errors) of the
    lane's requests (every lane's with "all") that started in [since, until)."""
    t = REQUESTS
    whole, spans = _spans(conn, since, until)
    parts: list[Any] = []
    for lo, hi in spans:
        raw = sa.select(
            t.c.model,
            sa.func.count(),
            count_if(t.c.truncated == sa.true()),
            count_if(capped_clause(t)),
            count_if(t.c.reasoning_leak == sa.true()),
            count_if(sa.or_(t.c.error_class.is_not(None), t.c.status >= 400)),
        ).where(_raw_rows(lo, hi, lane))
        parts.append(raw.group_by(t.c.model))
    if whole is not None:
        u = USAGE
        cols = (u.c.requests, u.c.truncated, u.c.capped, u.c.leaks, u.c.errors)
        rolled = sa.select(u.c.model, *(sa.func.sum(c) for c in cols))
        rolled = rolled.where(u.c.bucket >= whole[0], u.c.bucket < whole[1])
        if lane != "all":
            rolled = rolled.where(u.c.lane == lane)
        parts.append(rolled.group_by(u.c.model))
    out: dict[str, list[int]] = {}
    for query in parts:
        for model, *values in conn.execute(query):
            acc = out.setdefault(model, [0] * 5)
            out[model] = [a + int(v or 0) for a, v in zip(acc, values, strict=True)]
    return {m: (v[0], v[1], v[2], v[3], v[4]) for m, v in out.items()}


def bucket_counts(conn: Connection, since: float, until: float, lane: str) -> dict[int, int]:
    """Requests of the lane per 5-minute bucket (its start) that started in [since, until)."""
    t = REQUESTS
    whole, spans = _spans(conn, since, until)
    postgres = conn.dialect.name == "postgresql"
    parts: list[Any] = []
    for lo, hi in spans:
        bucket = bucket_of(t.c.time, postgres)
        parts.append(
            sa.select(bucket, sa.func.count()).where(_raw_rows(lo, hi, lane)).group_by(bucket)
        )
    if whole is not None:
        u = USAGE
        rolled = sa.select(u.c.bucket, sa.func.sum(u.c.requests))
        rolled = rolled.where(u.c.bucket >= whole[0], u.c.bucket < whole[1])
        if lane != "all":
            rolled = rolled.where(u.c.lane == lane)
        parts.append(rolled.group_by(u.c.bucket))
    out: dict[int, int] = {}
    for query in parts:
        for bucket, n in conn.execute(query):
            out[int(bucket)] = out.get(int(bucket), 0) + int(n or 0)
    return out
