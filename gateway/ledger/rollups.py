"""Hourly rollups of `requests`, so reports over days read hours, not rows.

`usage_hourly` holds `usage_query`'s sums per (hour, model, upstream) and `busy_hourly` each
node's busy seconds per hour. Housekeeping brings them up to date (`roll_up`): only the hours
completed since the last run (`rollup_marks`), each computed once, at most `MAX_HOURS` a call,
so it never re-walks a day. Readers (`usage`, `busy_seconds`) take whole rolled-up hours from
the tables and scan the raw rows only for the partial hours at either end of the window.

An hour is rolled up `SETTLE_S` after it ends; a record written later than that into a rolled-up
hour (a spool replayed after a long outage) is not in the rollup. Busy seconds of an hour count
requests that started up to an hour before it: a request longer than an hour that started before
the window may add to it, where the raw query would not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gateway.config import Config
from gateway.ledger.cost import Usage
from gateway.ledger.database import writing
from gateway.ledger.health_queries import attempts_query, failed_attempts, flags_query
from gateway.ledger.queries import busy_seconds_query, usage_of, usage_query
from gateway.ledger.rows import REQUESTS, metadata

HOUR = 3600
SETTLE_S = 300.0
MAX_HOURS = 6  # a tick at the seed rate reads about 2 M rows an hour rolled up
SUMS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "cost_usd",
    "charged_cost_usd",
    "charged_computed_usd",
    "truncated",
    "errors",
    "usage_estimated",
    "capped",
)
USAGE_HOURLY = sa.Table(
    "usage_hourly",
    metadata,
    sa.Column("hour", sa.BigInteger, primary_key=True),
    sa.Column("model", sa.String(128), primary_key=True),
    sa.Column("upstream", sa.String(128), primary_key=True),  # "" for none
    sa.Column("lane", sa.String(16), primary_key=True),  # client | eval | shadow
    *(sa.Column(n, sa.Float if "usd" in n else sa.BigInteger, nullable=False) for n in SUMS),
)
BUSY_HOURLY = sa.Table(
    "busy_hourly",
    metadata,
    sa.Column("hour", sa.BigInteger, primary_key=True),
    sa.Column("node", sa.String(128), primary_key=True),
    sa.Column("seconds", sa.Float, nullable=False),
)
# Rows read for the newest failed calls inside rolled-up hours (`_last_failures`).
LAST_FAILURE_ROWS = 500
FLAGS = 15  # the counts of `flags_query`, after the upstream
HEALTH_HOURLY = sa.Table(
    "health_hourly",
    metadata,
    sa.Column("hour", sa.BigInteger, primary_key=True),
    sa.Column("upstream", sa.String(128), primary_key=True),
    *(sa.Column(f"c{i}", sa.BigInteger, nullable=False) for i in range(FLAGS)),
    sa.Column("failed_calls", sa.BigInteger, nullable=False),
)
ROLLUP_MARKS = sa.Table(
    "rollup_marks",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("upto", sa.BigInteger, nullable=False),  # hours before this are rolled up
)


def hour_floor(t: float) -> int:
    return int(t // HOUR) * HOUR


def hour_ceil(t: float) -> int:
    return -int(-t // HOUR) * HOUR


def mark(conn: Connection) -> int | None:
    """The end of the rolled-up hours, or None before the first rollup."""
    q = sa.select(ROLLUP_MARKS.c.upto).where(ROLLUP_MARKS.c.name == "hourly")
    value = conn.execute(q).scalar()
    return None if value is None else int(value)


def busy_in(
    conn: Connection, ups: Sequence[str], starts: tuple[float, float], clip: tuple[float, float]
) -> float:
    """Seconds of the union of the intervals of requests to `ups` that started in `starts`,
    clipped to `clip`."""
    if not ups or starts[1] <= starts[0] or clip[1] <= clip[0]:
        return 0.0
    query = busy_seconds_query(ups, starts[0], starts[1], clip[1], clip[0])
    return float(conn.execute(query).scalar() or 0.0)


def _roll_hour(conn: Connection, hour: int, nodes: dict[str, list[str]]) -> None:
    conn.execute(USAGE_HOURLY.delete().where(USAGE_HOURLY.c.hour == hour))
    conn.execute(BUSY_HOURLY.delete().where(BUSY_HOURLY.c.hour == hour))
    conn.execute(HEALTH_HOURLY.delete().where(HEALTH_HOURLY.c.hour == hour))
    flags = {r[0]: list(r[1:]) for r in conn.execute(flags_query(hour, hour + HOUR))}
    failed = failed_attempts(conn.execute(attempts_query(hour, hour + HOUR)))
    health = [
        {
            "hour": hour,
            "upstream": u,
            **{f"c{i}": int(v or 0) for i, v in enumerate(flags.get(u, [0] * FLAGS))},
            "failed_calls": failed.get(u, 0),
        }
        for u in sorted(set(flags) | set(failed))
    ]
    if health:
        conn.execute(HEALTH_HOURLY.insert(), health)
    rows = [
        {
            "hour": hour,
            "model": r[0],
            "upstream": r[1] or "",
            "lane": r[-1],
            **dict(zip(SUMS, r[2:-1], strict=True)),
        }
        for r in conn.execute(usage_query(hour, hour + HOUR))
    ]
    if rows:
        conn.execute(USAGE_HOURLY.insert(), rows)
    busy = [
        {
            "hour": hour,
            "node": node,
            "seconds": busy_in(conn, ups, (hour - HOUR, hour + HOUR), (hour, hour + HOUR)),
        }
        for node, ups in nodes.items()
    ]
    if busy:
        conn.execute(BUSY_HOURLY.insert(), busy)


def roll_up(
    engine: Engine, nodes: dict[str, list[str]], now: float, max_hours: int = MAX_HOURS
) -> int:
    """Roll up the hours completed (and settled) since the last call, oldest first, at most
    `max_hours`, each in its own transaction; returns the hours rolled up."""
    end = hour_floor(now - SETTLE_S)
    with engine.connect() as conn:
        upto = mark(conn)
        if upto is None:
            oldest = conn.execute(sa.select(sa.func.min(REQUESTS.c.time))).scalar()
            upto = end if oldest is None else hour_floor(oldest)
    done = 0
    while upto < end and done < max_hours:
        with writing(engine) as conn:
            _roll_hour(conn, upto, nodes)
            upto += HOUR
            conn.execute(ROLLUP_MARKS.delete().where(ROLLUP_MARKS.c.name == "hourly"))
            conn.execute(ROLLUP_MARKS.insert().values(name="hourly", upto=upto))
        done += 1
    if done == 0:
        with writing(engine) as conn:
            if mark(conn) is None:
                conn.execute(ROLLUP_MARKS.insert().values(name="hourly", upto=upto))
    return done


def _whole_hours(conn: Connection, since: float, until: float) -> tuple[int, int] | None:
    """The rolled-up whole hours [a, b) inside [since, until), or None."""
    upto = mark(conn)
    if upto is None:
        return None
    a, b = hour_ceil(since), min(hour_floor(until), upto)
    return (a, b) if b > a else None


def usage(conn: Connection, since: float, until: float) -> list[Usage]:
    """`usage_query`'s answer: rolled-up hours plus raw scans of the partial ends."""
    hours = _whole_hours(conn, since, until)
    if hours is None:
        return [usage_of(r) for r in conn.execute(usage_query(since, until))]
    a, b = hours
    t = USAGE_HOURLY
    rolled = (
        sa.select(t.c.model, t.c.upstream, *(sa.func.sum(t.c[n]) for n in SUMS), t.c.lane)
        .where(t.c.hour >= a, t.c.hour < b)
        .group_by(t.c.model, t.c.upstream, t.c.lane)
    )
    totals: dict[tuple[str, str | None, str], list[Any]] = {}
    parts = [list(conn.execute(rolled))]
    parts += [
        list(conn.execute(usage_query(lo, hi))) for lo, hi in ((since, a), (b, until)) if hi > lo
    ]
    for part in parts:
        for r in part:
            key = (r[0], r[1] or None, r[-1])
            acc = totals.setdefault(key, [0] * len(SUMS))
            totals[key] = [x + (y or 0) for x, y in zip(acc, r[2:-1], strict=True)]
    # The raw query's order: NULL upstreams first on SQLite, last on PostgreSQL.
    nulls_last = conn.dialect.name == "postgresql"
    ordered = sorted(
        totals.items(),
        key=lambda kv: (kv[0][0], (kv[0][1] is None) == nulls_last, kv[0][1] or "", kv[0][2]),
    )
    return [usage_of((m, u, *v, lane)) for (m, u, lane), v in ordered]


def busy_seconds(
    conn: Connection, node: str, ups: Sequence[str], since: float, until: float
) -> float:
    """The node's busy seconds in the window: the raw lead (requests started in its first hour
    and a bit), the rolled-up hours after it, and the raw tail (clipped to `until`)."""
    hours = _whole_hours(conn, since, until)
    if hours is None or hours[1] - hours[0] < 2 * HOUR:
        return busy_in(conn, ups, (since, until), (since, until))
    a, b = hours
    lead = busy_in(conn, ups, (since, a + HOUR), (since, a + HOUR))
    t = BUSY_HOURLY
    mid = conn.execute(
        sa.select(sa.func.sum(t.c.seconds)).where(
            t.c.node == node, t.c.hour >= a + HOUR, t.c.hour < b
        )
    ).scalar()
    tail = busy_in(conn, ups, (b - HOUR, until), (b, until))
    return lead + float(mid or 0.0) + tail


def health_counts(
    conn: Connection,
    since: float,
    until: float,
    last: dict[str, tuple[str, float]] | None = None,
) -> tuple[list[tuple[Any, ...]], Counter[str]]:
    """`report health`'s (flags rows, failed calls per upstream) over the window: rolled-up
    whole hours plus raw scans of the partial ends. `last` gets each upstream's newest failed
    call (outcome, time): from the raw ends, and inside the rolled-up hours from the newest
    rows that may hold one (`_last_failures`)."""
    hours = _whole_hours(conn, since, until)
    spans = [(since, until)] if hours is None else [(since, hours[0]), (hours[1], until)]
    flags: dict[str, list[int]] = {}
    failed: Counter[str] = Counter()
    for lo, hi in spans:
        if hi > lo:
            for r in conn.execute(flags_query(lo, hi)):
                _add(flags, r[0], r[1:])
            failed.update(failed_attempts(conn.execute(attempts_query(lo, hi)), last))
    if hours is not None:
        if last is not None:
            _last_failures(conn, hours, last)
        t = HEALTH_HOURLY
        sums = [sa.func.sum(t.c[f"c{i}"]) for i in range(FLAGS)]
        rolled = (
            sa.select(t.c.upstream, *sums, sa.func.sum(t.c.failed_calls))
            .where(t.c.hour >= hours[0], t.c.hour < hours[1])
            .group_by(t.c.upstream)
        )
        for r in conn.execute(rolled):
            if int(r[1] or 0):  # the upstream answered some request
                _add(flags, r[0], r[1:-1])
            if int(r[-1] or 0):
                failed[r[0]] += int(r[-1])
    return [(u, *v) for u, v in sorted(flags.items())], failed


def _last_failures(
    conn: Connection, hours: tuple[float, float], last: dict[str, tuple[str, float]]
) -> None:
    """The newest failed calls inside the rolled-up hours, for `last`: the newest rows that may
    hold one, not the hours' every row (an upstream whose last failure is older than these keeps
    the one the raw ends found, if any)."""
    newest = attempts_query(*hours).order_by(REQUESTS.c.time.desc()).limit(LAST_FAILURE_ROWS)
    found: dict[str, tuple[str, float]] = {}
    failed_attempts(conn.execute(newest), found)
    for upstream, (outcome, when) in found.items():
        seen = last.get(upstream)
        if seen is None or when > seen[1]:
            last[upstream] = (outcome, when)


def node_upstreams(config: Config) -> dict[str, list[str]]:
    """Each configured node's upstreams, by name."""
    return {n: [u.name for u in config.upstreams if u.node == n] for n in config.nodes}


def _add(acc: dict[str, list[int]], key: str, values: Sequence[Any]) -> None:
    old = acc.get(key, [0] * len(values))
    acc[key] = [a + int(b or 0) for a, b in zip(old, values, strict=True)]
