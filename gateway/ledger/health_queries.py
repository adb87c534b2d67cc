"""What `report health` counts per upstream, as queries on `requests`: the watchdog checks'
flags of the records each upstream answered, and the failed calls in the records' `attempts`
(`gateway.reports.health` renders them; `gateway.ledger.rollup_sql` keeps them per 5 minutes).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from gateway.ledger.rows import REQUESTS
from gateway.ledger.truncation import capped_clause, upstream_cut_clause

NOT_FAILURES = frozenset({"ok", "cancelled"})


def _count_if(cond: Any) -> Any:
    return sa.func.sum(sa.case((cond, sa.literal(1)), else_=0))


def flag_counts() -> list[Any]:
    """`flags_query`'s counts after the upstream (the rollups sum the same)."""
    t = REQUESTS
    ok = sa.and_(t.c.status == 200, t.c.error_class.is_(None), t.c.door != "embeddings")
    error = sa.or_(t.c.error_class.is_not(None), t.c.status >= 400)
    return [
        sa.func.count(),
        _count_if(ok),
        _count_if(error),
        _count_if(sa.and_(ok, upstream_cut_clause(t))),
        _count_if(sa.and_(ok, capped_clause(t))),
        _count_if(sa.and_(ok, t.c.reasoning_leak == sa.true())),
        _count_if(t.c.sampled == sa.true()),
        _count_if(t.c.degenerate == sa.true()),
        _count_if(sa.or_(t.c.tool_calls > 0, t.c.tool_call_error.is_not(None))),
        _count_if(t.c.tool_call_error.is_not(None)),
        _count_if(t.c.provider.is_not(None)),
        _count_if(t.c.provider_mismatch == sa.true()),
        _count_if(t.c.charged_cost_usd.is_not(None)),
        _count_if(t.c.cost_drift == sa.true()),
        _count_if(sa.and_(ok, t.c.unasked_reasoning == sa.true())),
    ]


def flags_query(since: float, until: float) -> Any:
    t = REQUESTS
    return (
        sa.select(t.c.upstream, *flag_counts())
        .where(t.c.time >= since, t.c.time < until, t.c.upstream.is_not(None))
        .group_by(t.c.upstream)
        .order_by(t.c.upstream)
    )


def attempts_query(since: float, until: float) -> Any:
    """Rows that may hold a failed attempt: none answered, an error, or more than one call (the
    compact JSON of two attempts has `},{`). A lone successful call is never read."""
    t = REQUESTS
    return sa.select(t.c.upstream, t.c.status, t.c.attempts, t.c.time).where(
        t.c.time >= since,
        t.c.time < until,
        sa.or_(
            t.c.upstream.is_(None),
            t.c.error_class.is_not(None),
            t.c.status != 200,
            t.c.attempts.like("%},{%"),
        ),
    )


def failed_attempts(
    rows: Iterable[Sequence[Any]], last: dict[str, tuple[str, float]] | None = None
) -> Counter[str]:
    """Failed calls per upstream from (upstream, status, attempts JSON[, time]) rows. The last
    call of a request the upstream refused as the request's fault (the record names it and has
    its 4xx) was the upstream answering. `last` gets each upstream's newest failed call's
    (outcome, time) where the rows have times."""
    out: Counter[str] = Counter()
    for answered_by, status, raw, *when in rows:
        try:
            attempts = json.loads(raw or "[]")
        except ValueError:
            continue
        for i, a in enumerate(attempts):
            if not isinstance(a, dict) or a.get("outcome") in NOT_FAILURES:
                continue
            refused = (
                i == len(attempts) - 1
                and a.get("upstream") == answered_by
                and 400 <= int(status or 0) < 500
                and a.get("status") is not None
                and 400 <= int(a["status"]) < 500
            )
            if not refused and isinstance(a.get("upstream"), str):
                out[a["upstream"]] += 1
                seen = last.get(a["upstream"]) if last is not None else None
                if last is not None and when and (seen is None or when[0] >= seen[1]):
                    last[a["upstream"]] = (str(a.get("outcome")), float(when[0]))
    return out
