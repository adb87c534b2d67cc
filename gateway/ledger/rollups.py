"""Rollups of `requests` in 5-minute buckets, so reports over days read buckets, not rows.

The data model (migration `0019`; tables in `gateway.ledger.rollup_sql`, which fills them):

- `usage_rollup`: per (bucket, model, upstream, lane) `usage_query`'s sums, and the reasoning
  leaks (the console's traffic panel);
- `busy_rollup`: per (bucket, node) the node's busy seconds inside the bucket: the union of its
  upstreams' request intervals, counting requests that started up to `BUSY_LOOKBACK` before it;
- `health_rollup`: per (bucket, upstream) `report health`'s counts and failed calls;
- `rollup_marks`: buckets before `upto` are rolled up (and, where rows went before their
  rollups, the first day of rows kept: `RAW_FLOOR`);
- `rollup_dirty`: buckets below the mark that a record was written into later (a spool replayed
  after an outage, a long request's record written when it ended): the store's writer marks
  them in the insert's transaction (`late_buckets`) and the next `roll_up` rolls them again.

A bucket is `BUCKET` seconds, epoch-aligned. Housekeeping (`roll_up`, each minute in a thread)
rolls up the buckets completed at least `SETTLE_S` ago, then the dirty ones, each range with one
`INSERT … SELECT … GROUP BY` per table that the database runs (no row through Python), at most
`MAX_BUCKETS` a tick so a big store's backfill is spread over ticks. Readers (`usage`,
`busy_seconds`, `health_counts`, and `gateway.ledger.rollup_traffic` for the traffic panel)
take whole rolled-up buckets from the tables and scan the raw rows only at the window's ends:
under one bucket at the start, and from the mark to the window's end (the last `SETTLE_S` and
up to a bucket and a tick) -- a few minutes of rows. Busy seconds read `BUSY_EDGE` more at each
end: a request longer than that which started before the window may add to its busy time where
the raw query would not (and a request longer than `BUSY_LOOKBACK` adds only its first part).
Retention drops rollup rows with the raw days (`forget_before`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from gateway.config import Config
from gateway.ledger.cost import Usage
from gateway.ledger.database import writing
from gateway.ledger.health_queries import attempts_query, failed_attempts, flags_query
from gateway.ledger.partitions import day_start
from gateway.ledger.queries import busy_seconds_query, usage_of, usage_query
from gateway.ledger.rollup_sql import (
    BUCKET,
    BUSY,
    BUSY_LOOKBACK,
    CHUNK,
    DIRTY,
    FLAGS,
    HEALTH,
    HI,
    LO,
    MARKS,
    SUMS,
    TABLES,
    USAGE,
    range_params,
    statements,
)
from gateway.ledger.rows import REQUESTS

HOUR = 3600
SETTLE_S = 120.0  # late records are rolled up again (`rollup_dirty`)
MAX_HOURS = 6
MAX_BUCKETS = MAX_HOURS * HOUR // BUCKET  # a tick at the seed rate reads about 12 M rows
BUSY_EDGE = 300  # raw seconds busy readers scan past each end's partial bucket
STALE_S = 1800.0  # a mark further behind than this: nobody rolls up, gauges read raw rows
MARK = "buckets"
# The first UTC day whose raw rows are kept, where retention drops rows before their rollups
# (`[store] rollup_retention_days` past `retention_days`, gateway/ledger/retention.py).
RAW_FLOOR = "raw_floor"


_DIRTY_INSERT = {
    pg: (postgresql if pg else sqlite).insert(DIRTY).on_conflict_do_nothing()
    for pg in (True, False)
}
_CLEAR = {t.name: t.delete().where(t.c.bucket >= LO, t.c.bucket < HI) for t in (DIRTY, *TABLES)}


def floor_bucket(t: float) -> int:
    return int(t // BUCKET) * BUCKET


def ceil_bucket(t: float) -> int:
    return -int(-t // BUCKET) * BUCKET


def mark(conn: Connection, name: str = MARK) -> int | None:
    """The end of the rolled-up buckets, or None before the first rollup (`name`: another
    mark kept in the same table, `RAW_FLOOR`)."""
    value = conn.execute(sa.select(MARKS.c.upto).where(MARKS.c.name == name)).scalar()
    return None if value is None else int(value)


def raw_floor(conn: Connection) -> int | None:
    """The first day of raw rows kept, where older ones were dropped before their rollups."""
    return mark(conn, RAW_FLOOR)


def set_raw_floor(conn: Connection, day: int) -> None:
    """Raw rows before `day` are gone (and their rollups kept): never rolled up again, and the
    marks of late records below it dropped."""
    floor = raw_floor(conn)
    if floor is None or floor < day:
        _set_mark(conn, day, RAW_FLOOR)
        floor = day
    conn.execute(DIRTY.delete().where(DIRTY.c.bucket < floor))


def busy_in(
    conn: Connection, ups: Sequence[str], starts: tuple[float, float], clip: tuple[float, float]
) -> float:
    """Seconds of the union of the intervals of requests to `ups` that started in `starts`,
    clipped to `clip`."""
    if not ups or starts[1] <= starts[0] or clip[1] <= clip[0]:
        return 0.0
    query = busy_seconds_query(ups, starts[0], starts[1], clip[1], clip[0])
    return float(conn.execute(query).scalar() or 0.0)


def _roll(conn: Connection, lo: int, hi: int, nodes: dict[str, list[str]]) -> None:
    """Roll up the buckets [lo, hi): their dirty marks cleared first (a record written
    meanwhile marks its bucket again), then one INSERT … SELECT per table."""
    postgres = conn.dialect.name == "postgresql"
    params = range_params(lo, hi)
    for table in (DIRTY, *TABLES):
        conn.execute(_CLEAR[table.name], params)
    owners = tuple((n, tuple(ups)) for n, ups in sorted(nodes.items()))
    for statement in statements(postgres, owners):
        conn.execute(statement, params)


def _runs(buckets: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive buckets as [lo, hi) ranges of at most `CHUNK` buckets."""
    runs: list[tuple[int, int]] = []
    for k in sorted(buckets):
        if runs and runs[-1][1] == k and k - runs[-1][0] < CHUNK * BUCKET:
            runs[-1] = (runs[-1][0], k + BUCKET)
        else:
            runs.append((k, k + BUCKET))
    return runs


def roll_up(
    engine: Engine, nodes: dict[str, list[str]], now: float, max_buckets: int = MAX_BUCKETS
) -> int:
    """Roll up the buckets completed (and settled) since the last call, oldest first, then the
    dirty ones below the mark, at most `max_buckets` in all, a range per transaction; returns
    the buckets rolled up."""
    end = floor_bucket(now - SETTLE_S)
    with engine.connect() as conn:
        upto = mark(conn)
        dirty: list[int] = []
        if upto is None:
            oldest = conn.execute(sa.select(sa.func.min(REQUESTS.c.time))).scalar()
            upto = end if oldest is None else floor_bucket(oldest)
        else:
            # A bucket whose raw rows retention dropped keeps its rollups: a late record marks
            # it dirty (`mark_late`), but rolling it up again would count that record alone.
            floor = raw_floor(conn) or 0
            q = sa.select(DIRTY.c.bucket).where(DIRTY.c.bucket < upto, DIRTY.c.bucket >= floor)
            q = q.order_by(DIRTY.c.bucket).limit(max_buckets)
            dirty = [int(k) for k in conn.execute(q).scalars()]
    done = 0
    while upto < end and done < max_buckets:
        hi = min(end, upto + CHUNK * BUCKET, upto + (max_buckets - done) * BUCKET)
        with writing(engine) as conn:
            _roll(conn, upto, hi, nodes)
            _set_mark(conn, hi)
        done += (hi - upto) // BUCKET
        upto = hi
    for lo, hi in _runs(dirty[: max(0, max_buckets - done)]):
        with writing(engine) as conn:
            _roll(conn, lo, hi, nodes)
        done += (hi - lo) // BUCKET
    if done == 0:
        with writing(engine) as conn:
            if mark(conn) is None:
                _set_mark(conn, upto)
    return done


def _set_mark(conn: Connection, upto: int, name: str = MARK) -> None:
    conn.execute(MARKS.delete().where(MARKS.c.name == name))
    conn.execute(MARKS.insert().values(name=name, upto=upto))


def late_buckets(rows: Iterable[dict[str, Any]], now: float) -> list[int]:
    """The buckets that `rows` may change and that may be rolled up already (ended more than
    half of `SETTLE_S` ago, clocks of gateways apart by less): each row's start bucket and,
    for busy seconds, the buckets its interval reaches (up to `BUSY_LOOKBACK`). The writer
    marks them dirty in the insert's transaction."""
    limit = now - SETTLE_S / 2
    out: set[int] = set()
    for r in rows:
        t = float(r["time"])
        if t >= limit:  # its bucket cannot have ended before the limit
            continue
        reach = min(float(r.get("e2e_s") or 0.0), BUSY_LOOKBACK + BUCKET)
        for k in range(floor_bucket(t), floor_bucket(t + max(reach, 0.0)) + 1, BUCKET):
            if k + BUCKET <= limit:
                out.add(k)
    return sorted(out)


def mark_late(conn: Connection, rows: Iterable[dict[str, Any]], now: float) -> None:
    """Mark dirty, in the writer's transaction, the buckets of `late_buckets`."""
    late = late_buckets(rows, now)
    if late:
        conn.execute(
            _DIRTY_INSERT[conn.dialect.name == "postgresql"], [{"bucket": k} for k in late]
        )


def forget_before(engine: Engine, cutoff: float) -> None:
    """Drop the rollup rows (and dirty marks) of the days retention dropped: buckets before the
    UTC day of `cutoff` (a day's raw rows go when the whole day ended before it)."""
    day = day_start(cutoff)
    with writing(engine) as conn:
        for table in (*TABLES, DIRTY):
            conn.execute(table.delete().where(table.c.bucket < day))


def whole_buckets(conn: Connection, since: float, until: float) -> tuple[int, int] | None:
    """The rolled-up whole buckets [a, b) inside [since, until), or None."""
    upto = mark(conn)
    if upto is None:
        return None
    a, b = ceil_bucket(since), min(floor_bucket(until), upto)
    return (a, b) if b > a else None


def usage(conn: Connection, since: float, until: float) -> list[Usage]:
    """`usage_query`'s answer: rolled-up buckets plus raw scans of the partial ends."""
    whole = whole_buckets(conn, since, until)
    if whole is None:
        return [usage_of(r) for r in conn.execute(usage_query(since, until))]
    a, b = whole
    t = USAGE
    rolled = (
        sa.select(t.c.model, t.c.upstream, *(sa.func.sum(t.c[n]) for n in SUMS), t.c.lane)
        .where(t.c.bucket >= a, t.c.bucket < b)
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


def settled_span(
    conn: Connection, window_s: float, now: float, stale_s: float = STALE_S
) -> tuple[float, float] | None:
    """The last `window_s` of rolled-up buckets, [mark - window_s, mark), for a periodic gauge
    that reads buckets only (`usage` and `busy_seconds(edges=False)` then scan no raw row); None
    before the first rollup or when the mark is more than `stale_s` behind `now` (nobody rolls
    up: the caller reads the exact window instead)."""
    upto = mark(conn)
    if upto is None or upto < now - stale_s:
        return None
    return floor_bucket(upto - window_s), float(upto)


def busy_seconds(
    conn: Connection,
    node: str,
    ups: Sequence[str],
    since: float,
    until: float,
    edges: bool = True,
) -> float:
    """The node's busy seconds in the window: the raw lead (requests started in its first
    partial bucket and `BUSY_EDGE` after), the rolled-up buckets after it, and the raw tail
    (requests started from `BUSY_EDGE` before the mark, clipped to [mark, until)).

    `edges=False` (a `settled_span` window): the rolled-up buckets only, which count the busy
    time inside the window of requests that started up to `BUSY_LOOKBACK` before it."""
    whole = whole_buckets(conn, since, until)
    if not edges and whole is not None:
        a, b = whole
        t = BUSY
        rolled = sa.select(sa.func.sum(t.c.seconds)).where(
            t.c.node == node, t.c.bucket >= a, t.c.bucket < b
        )
        return float(conn.execute(rolled).scalar() or 0.0)
    if whole is None or whole[1] - whole[0] < BUSY_EDGE + BUCKET:
        return busy_in(conn, ups, (since, until), (since, until))
    a, b = whole
    head = a + BUSY_EDGE
    lead = busy_in(conn, ups, (since, head), (since, head))
    t = BUSY
    mid = conn.execute(
        sa.select(sa.func.sum(t.c.seconds)).where(
            t.c.node == node, t.c.bucket >= head, t.c.bucket < b
        )
    ).scalar()
    tail = busy_in(conn, ups, (b - BUSY_EDGE, until), (b, until))
    return lead + float(mid or 0.0) + tail


def health_counts(
    conn: Connection,
    since: float,
    until: float,
    last: dict[str, tuple[str, float]] | None = None,
) -> tuple[list[tuple[Any, ...]], Counter[str]]:
    """`report health`'s (flags rows, failed calls per upstream) over the window: rolled-up
    whole buckets plus raw scans of the partial ends. `last` gets each upstream's newest failed
    call (outcome, time): from the raw ends, and inside the rolled-up buckets from the newest
    bucket holding one (`_last_failures`)."""
    hours = whole_buckets(conn, since, until)
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
        t = HEALTH
        sums = [sa.func.sum(t.c[f"c{i}"]) for i in range(FLAGS)]
        rolled = (
            sa.select(t.c.upstream, *sums, sa.func.sum(t.c.failed_calls))
            .where(t.c.bucket >= hours[0], t.c.bucket < hours[1])
            .group_by(t.c.upstream)
        )
        for r in conn.execute(rolled):
            if int(r[1] or 0):  # the upstream answered some request
                _add(flags, r[0], r[1:-1])
            if int(r[-1] or 0):
                failed[r[0]] += int(r[-1])
    return [(u, *v) for u, v in sorted(flags.items())], failed


def _last_failures(
    conn: Connection, whole: tuple[int, int], last: dict[str, tuple[str, float]]
) -> None:
    """The newest failed call of each upstream inside the rolled-up buckets, for `last`: the
    newest bucket with a failed call per upstream (`health_rollup`), and the raw rows of just
    those buckets."""
    t = HEALTH
    newest = (
        sa.select(t.c.upstream, sa.func.max(t.c.bucket))
        .where(t.c.bucket >= whole[0], t.c.bucket < whole[1], t.c.failed_calls > 0)
        .group_by(t.c.upstream)
    )
    wanted: dict[int, set[str]] = {}
    for upstream, bucket in conn.execute(newest):
        wanted.setdefault(int(bucket), set()).add(upstream)
    for bucket, upstreams in wanted.items():
        found: dict[str, tuple[str, float]] = {}
        failed_attempts(conn.execute(attempts_query(bucket, bucket + BUCKET)), found)
        for upstream in upstreams & found.keys():
            outcome, when = found[upstream]
            seen = last.get(upstream)
            if seen is None or when > seen[1]:
                last[upstream] = (outcome, when)


def node_upstreams(config: Config) -> dict[str, list[str]]:
    """Each configured node's upstreams, by name."""
    return {n: [u.name for u in config.upstreams if u.node == n] for n in config.nodes}


def _add(acc: dict[str, list[int]], key: str, values: Sequence[Any]) -> None:
    old = acc.get(key, [0] * len(values))
    acc[key] = [a + int(b or 0) for a, b in zip(old, values, strict=True)]
