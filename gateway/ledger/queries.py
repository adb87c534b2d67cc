"""The report queries on `requests`: per (model, upstream) usage totals, the request intervals
that node hours are the union of, and that union's length computed in the database
(`gateway.ledger.store.Store.usage`, `intervals`, `busy_seconds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gateway.ledger.cost import Usage
from gateway.ledger.rows import REQUESTS
from gateway.ledger.truncation import capped_clause


def window(since: float, until: float | None) -> list[Any]:
    """Requests that started in [since, until)."""
    cond = [REQUESTS.c.time >= since]
    if until is not None:
        cond.append(REQUESTS.c.time < until)
    return cond


def count_if(cond: Any) -> Any:
    """SQL: how many rows of the group `cond` holds for."""
    return sa.func.sum(sa.case((cond, sa.literal(1)), else_=0))


def usage_sums() -> list[Any]:
    """`usage_query`'s aggregates after (model, upstream): count, token sums, costs, flagged
    requests (the rollups sum the same, `gateway.ledger.rollup_sql`)."""
    t = REQUESTS
    error = sa.or_(t.c.error_class.is_not(None), t.c.status >= 400)
    return [
        sa.func.count(),
        sa.func.sum(t.c.prompt_tokens),
        sa.func.sum(t.c.cached_tokens),
        sa.func.sum(t.c.completion_tokens),
        sa.func.sum(t.c.reasoning_tokens),
        sa.func.sum(sa.func.coalesce(t.c.cost_usd, 0.0)),
        sa.func.sum(sa.func.coalesce(t.c.charged_cost_usd, 0.0)),
        sa.func.sum(
            sa.case(
                (t.c.charged_cost_usd.is_not(None), sa.func.coalesce(t.c.cost_usd, 0.0)),
                else_=0.0,
            )
        ),
        count_if(t.c.truncated == sa.true()),
        count_if(error),
        count_if(t.c.usage_estimated == sa.true()),
        count_if(capped_clause(t)),
    ]


def usage_query(since: float, until: float | None) -> sa.Select[Any]:
    """One row per (model, upstream, lane): counts, token sums, costs and flagged requests."""
    t = REQUESTS
    return (
        sa.select(t.c.model, t.c.upstream, *usage_sums(), t.c.lane)
        .where(*window(since, until))
        .group_by(t.c.model, t.c.upstream, t.c.lane)
        .order_by(t.c.model, t.c.upstream, t.c.lane)
    )


def usage_of(r: Sequence[Any]) -> Usage:
    """A `usage_query` row as `Usage`."""
    n, prompt, cached, completion, reasoning = (int(x or 0) for x in r[2:7])
    cost, charged, basis = (float(x or 0) for x in r[7:10])
    truncated, errors, estimated, capped = (int(x or 0) for x in r[10:14])
    return Usage(
        r[0],
        r[1],
        n,
        prompt,
        cached,
        completion,
        reasoning,
        cost,
        charged,
        basis,
        truncated,
        errors,
        estimated,
        capped,
        r[14] if len(r) > 14 else "client",
    )


def intervals_query(upstreams: Sequence[str], since: float, until: float | None) -> sa.Select[Any]:
    """(start, e2e seconds) of every request to `upstreams` that started in the window."""
    t = REQUESTS
    return sa.select(t.c.time, sa.func.coalesce(t.c.e2e_s, 0.0)).where(
        t.c.upstream.in_(list(upstreams)), *window(since, until)
    )


def busy_seconds_query(
    upstreams: Sequence[str],
    since: float,
    until: float | None,
    end_cap: float,
    start_floor: float | None = None,
) -> sa.Select[Any]:
    """Seconds covered by the union of the request intervals of `upstreams` in the window
    (each clipped to `end_cap`), as one number the database computes: the classic gaps-and-
    islands pass. Ordered by start, a request opens a new island when it starts after every
    earlier one has ended (the running maximum of the ends before it); the islands' spans are
    summed. Window functions run in SQLite (3.25+) and PostgreSQL alike, so housekeeping never
    walks a day's intervals in Python. With `start_floor`, each interval also starts no earlier
    than it (the hourly rollups clip to their hour, `gateway.ledger.rollups`)."""
    t = REQUESTS
    start: Any = t.c.time
    if start_floor is not None:
        start = sa.case((t.c.time < start_floor, sa.literal(start_floor)), else_=t.c.time)
    end = t.c.time + sa.func.coalesce(t.c.e2e_s, 0.0)
    end = sa.case((end > end_cap, sa.literal(end_cap)), (end < start, start), else_=end)
    iv = (
        sa.select(start.label("s"), end.label("e"))
        .where(t.c.upstream.in_(list(upstreams)), *window(since, until))
        .subquery("iv")
    )
    order = (iv.c.s, iv.c.e)
    before = sa.func.max(iv.c.e).over(order_by=order, rows=(None, -1))
    marked = sa.select(iv.c.s, iv.c.e, before.label("before")).subquery("marked")
    opens = sa.case((sa.or_(marked.c.before.is_(None), marked.c.s > marked.c.before), 1), else_=0)
    island = sa.func.sum(opens).over(order_by=(marked.c.s, marked.c.e), rows=(None, 0))
    grouped = sa.select(marked.c.s, marked.c.e, island.label("island")).subquery("grouped")
    spans = (
        sa.select((sa.func.max(grouped.c.e) - sa.func.min(grouped.c.s)).label("span"))
        .group_by(grouped.c.island)
        .subquery("spans")
    )
    return sa.select(sa.func.coalesce(sa.func.sum(spans.c.span), 0.0))
