"""The 5-minute rollup tables and the statements that fill them inside the database.

Each rollup step is one `INSERT … SELECT … GROUP BY` per table over a range of buckets
(`usage_insert`, `health_insert`, `busy_insert`), executed by the database on SQLite and
PostgreSQL alike, so the housekeeping thread that runs them sends a few statements and waits:
no row of `requests` passes through Python. The inserts are upserts (`ON CONFLICT DO UPDATE`),
so rolling a bucket again (a late record, two gateways at once) replaces its rows.

- failed calls: the records' `attempts` JSON is expanded in SQL (`json_each` on SQLite,
  `json_array_elements … WITH ORDINALITY` on PostgreSQL) with the rule of
  `gateway.ledger.health_queries.failed_attempts` (tests compare both on the same rows);
- busy seconds: the gaps-and-islands merge (window functions, as
  `gateway.ledger.queries.busy_seconds_query`) over the requests that started up to
  `BUSY_LOOKBACK` before the range, per node, and each island's overlap with each bucket.

`gateway.ledger.rollups` runs them and reads the tables back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gateway.ledger.health_queries import flag_counts
from gateway.ledger.queries import count_if, usage_sums
from gateway.ledger.rows import REQUESTS, metadata

BUCKET = 300  # seconds
CHUNK = 12  # the most buckets one statement rolls up (an hour)
# A bucket's busy seconds count the requests that started up to this long before it: a request
# longer than that adds only its first `BUSY_LOOKBACK` (plus the bucket) to the node's busy time.
BUSY_LOOKBACK = 1800
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
FLAGS = 15  # the counts of `flags_query`, after the upstream
USAGE = sa.Table(
    "usage_rollup",
    metadata,
    sa.Column("bucket", sa.BigInteger, primary_key=True),  # epoch seconds, a multiple of BUCKET
    sa.Column("model", sa.String(128), primary_key=True),
    sa.Column("upstream", sa.String(128), primary_key=True),  # "" for none
    sa.Column("lane", sa.String(16), primary_key=True),  # client | eval | shadow
    *(sa.Column(n, sa.Float if "usd" in n else sa.BigInteger, nullable=False) for n in SUMS),
    sa.Column("leaks", sa.BigInteger, nullable=False),  # reasoning leaked (the traffic panel)
)
BUSY = sa.Table(
    "busy_rollup",
    metadata,
    sa.Column("bucket", sa.BigInteger, primary_key=True),
    sa.Column("node", sa.String(128), primary_key=True),
    sa.Column("seconds", sa.Float, nullable=False),
)
HEALTH = sa.Table(
    "health_rollup",
    metadata,
    sa.Column("bucket", sa.BigInteger, primary_key=True),
    sa.Column("upstream", sa.String(128), primary_key=True),
    *(sa.Column(f"c{i}", sa.BigInteger, nullable=False) for i in range(FLAGS)),
    sa.Column("failed_calls", sa.BigInteger, nullable=False),
)
MARKS = sa.Table(
    "rollup_marks",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("upto", sa.BigInteger, nullable=False),  # buckets before this are rolled up
)
DIRTY = sa.Table(
    "rollup_dirty",
    metadata,
    sa.Column("bucket", sa.BigInteger, primary_key=True),  # written into after its rollup
)
TABLES = (USAGE, BUSY, HEALTH)


def bucket_of(column: Any, postgres: bool) -> Any:
    """SQL: the start of the bucket holding epoch seconds `column` (positive)."""
    width = sa.literal(float(BUCKET), sa.Float)
    if postgres:
        return sa.cast(sa.func.floor(column / width), sa.BigInteger) * BUCKET
    return sa.cast(column / width, sa.Integer) * BUCKET  # truncation is floor here


def _upsert(table: sa.Table, select: sa.Select[Any], postgres: bool) -> Any:
    """INSERT … SELECT that replaces rows already there (the key: the primary key)."""
    names = [c.name for c in table.columns]
    ins = (postgresql if postgres else sqlite).insert(table).from_select(names, select)
    keys = [c.name for c in table.primary_key.columns]
    update = {n: ins.excluded[n] for n in names if n not in keys}
    return ins.on_conflict_do_update(index_elements=keys, set_=update)


# A rollup range's bounds, bound at execution (`range_params`): each statement is built and
# compiled once (`statements`), so a tick's Python work is a few cached executions.
LO = sa.bindparam("lo", type_=sa.Float)
HI = sa.bindparam("hi", type_=sa.Float)
FIRST = sa.bindparam("first", type_=sa.BigInteger)  # LO as the first bucket


def range_params(lo: int, hi: int) -> dict[str, Any]:
    return {"lo": float(lo), "hi": float(hi), "first": int(lo)}


@functools.cache
def statements(postgres: bool, nodes: tuple[tuple[str, tuple[str, ...]], ...]) -> list[Any]:
    """The upserts that roll up the buckets of `range_params`' bounds (at most `CHUNK`):
    usage, health, and busy seconds where the nodes have upstreams."""
    out = [usage_insert(postgres), health_insert(postgres)]
    if any(ups for _, ups in nodes):
        out.append(busy_insert(dict(nodes), postgres))
    return out


def _in(lo: Any, hi: Any) -> list[Any]:
    return [REQUESTS.c.time >= lo, REQUESTS.c.time < hi]


def usage_insert(postgres: bool, lo: Any = LO, hi: Any = HI) -> Any:
    """Usage sums per (bucket, model, upstream, lane) of the requests started in [lo, hi)."""
    t = REQUESTS
    bucket = bucket_of(t.c.time, postgres)
    upstream = sa.func.coalesce(t.c.upstream, "")
    select = (
        sa.select(
            bucket,
            t.c.model,
            upstream,
            t.c.lane,
            *usage_sums(),
            count_if(t.c.reasoning_leak == sa.true()),
        )
        .where(*_in(lo, hi))
        .group_by(bucket, t.c.model, upstream, t.c.lane)
    )
    return _upsert(USAGE, select, postgres)


def _attempt_fields(postgres: bool) -> tuple[Any, dict[str, Any]]:
    """The requests joined to their attempts (one row per attempt), and SQL for each attempt:
    whether it is a JSON object, its upstream if a string, outcome, status and whether it is
    the request's last."""
    t = REQUESTS
    if postgres:
        doc = sa.case(
            (t.c.attempts.like("[%"), sa.cast(t.c.attempts, postgresql.JSON)),
            else_=sa.cast(sa.literal("[]"), postgresql.JSON),
        )
        elements = sa.func.json_array_elements(doc).table_valued("value", with_ordinality="n")
        a = elements.render_derived("a")
        v = a.c.value

        def text(name: str) -> Any:
            return sa.func.json_extract_path_text(v, name)

        def kind(name: str) -> Any:
            return sa.func.json_typeof(sa.func.json_extract_path(v, name))

        fields = {
            "object": sa.func.json_typeof(v) == "object",
            "upstream": sa.case((kind("upstream") == "string", text("upstream"))),
            "outcome": text("outcome"),
            "status": sa.case((kind("status") == "number", sa.cast(text("status"), sa.Float))),
            "last": a.c.n == sa.func.json_array_length(doc),
        }
    else:
        doc = sa.case((sa.func.json_valid(t.c.attempts) == 1, t.c.attempts), else_="[]")
        a = sa.func.json_each(doc).table_valued("key", "value", "type").alias("a")

        def field(name: str) -> Any:
            return sa.func.json_extract(a.c.value, f"$.{name}")

        def kind(name: str) -> Any:
            return sa.func.json_type(a.c.value, f"$.{name}")

        fields = {
            "object": a.c.type == "object",
            "upstream": sa.case((kind("upstream") == "text", field("upstream"))),
            "outcome": field("outcome"),
            "status": sa.case((kind("status").in_(["integer", "real"]), field("status"))),
            "last": a.c.key == sa.func.json_array_length(doc) - 1,
        }
    return t.join(a, sa.true()), fields


def failed_calls_select(lo: Any, hi: Any, postgres: bool, bucketed: bool = True) -> Any:
    """(bucket, upstream, failed calls) of the requests started in [lo, hi) (without the
    bucket unless `bucketed`): the rule of
    `failed_attempts` in SQL. An attempt fails unless its outcome is ok or cancelled; the last
    call of a request the upstream refused as the request's fault (the record names that
    upstream and has its 4xx, and so does the attempt) is the upstream answering."""
    t = REQUESTS
    joined, f = _attempt_fields(postgres)
    status = sa.func.coalesce(t.c.status, 0)
    refused = sa.and_(
        f["last"],
        f["upstream"] == t.c.upstream,
        status >= 400,
        status < 500,
        f["status"] >= 400,
        f["status"] < 500,
    )
    bucket = bucket_of(t.c.time, postgres)
    keys = [bucket.label("bucket"), f["upstream"].label("upstream")]
    keys = keys if bucketed else keys[1:]
    return (
        sa.select(*keys, sa.func.count())
        .select_from(joined)
        .where(
            *_in(lo, hi),
            sa.or_(
                t.c.upstream.is_(None),
                t.c.error_class.is_not(None),
                t.c.status != 200,
                t.c.attempts.like("%},{%"),
            ),
            f["object"],
            f["upstream"].is_not(None),
            sa.or_(f["outcome"].is_(None), f["outcome"].not_in(["ok", "cancelled"])),
            sa.not_(sa.func.coalesce(refused, False)),
        )
        .group_by(*(bucket, f["upstream"])[2 - len(keys) :])
    )


def health_insert(postgres: bool, lo: Any = LO, hi: Any = HI) -> Any:
    """`report health`'s counts and failed calls per (bucket, upstream): both parts unioned
    (an upstream may only have failed) and summed."""
    t = REQUESTS
    bucket = bucket_of(t.c.time, postgres)
    zero = sa.literal(0, sa.BigInteger)
    flags = (
        sa.select(bucket.label("bucket"), t.c.upstream.label("upstream"), *flag_counts(), zero)
        .where(*_in(lo, hi), t.c.upstream.is_not(None))
        .group_by(bucket, t.c.upstream)
    )
    failed = failed_calls_select(lo, hi, postgres).subquery("failed")
    count = list(failed.c)[2]
    failed_rows = sa.select(failed.c.bucket, failed.c.upstream, *([zero] * FLAGS), count)
    both = sa.union_all(flags, failed_rows).subquery("both")
    cols = list(both.c)
    select = (
        sa.select(cols[0], cols[1], *(sa.func.sum(c) for c in cols[2:]))
        .where(cols[0].is_not(None))
        .group_by(cols[0], cols[1])
    )
    return _upsert(HEALTH, select, postgres)


def busy_insert(nodes: Mapping[str, Sequence[str]], postgres: bool) -> Any:
    """Each node's busy seconds per bucket of [lo, hi) (at most `CHUNK` buckets): the union of the
    intervals of the requests to its upstreams that started in [lo - BUSY_LOOKBACK, hi), ends
    clipped to `hi`, merged into islands (gaps and islands, partitioned by node) and cut at
    the bucket edges."""
    t = REQUESTS
    owner = {u: n for n, ups in nodes.items() for u in ups}
    node = sa.case(*((t.c.upstream == u, sa.literal(n)) for u, n in owner.items()))
    end = t.c.time + sa.func.coalesce(t.c.e2e_s, 0.0)
    lo, hi = LO, HI
    end = sa.case((end > hi, hi), (end < t.c.time, t.c.time), else_=end)
    iv = (
        sa.select(node.label("node"), t.c.time.label("s"), end.label("e"))
        .where(t.c.upstream.in_(list(owner)), *_in(lo - BUSY_LOOKBACK, hi))
        .subquery("iv")
    )
    order = (iv.c.s, iv.c.e)
    before = sa.func.max(iv.c.e).over(partition_by=iv.c.node, order_by=order, rows=(None, -1))
    marked = sa.select(iv.c.node, iv.c.s, iv.c.e, before.label("before")).subquery("marked")
    opens = sa.case((sa.or_(marked.c.before.is_(None), marked.c.s > marked.c.before), 1), else_=0)
    island = sa.func.sum(opens).over(
        partition_by=marked.c.node, order_by=(marked.c.s, marked.c.e), rows=(None, 0)
    )
    grouped = sa.select(marked.c.node, marked.c.s, marked.c.e, island.label("island")).subquery()
    islands = (
        sa.select(
            grouped.c.node,
            sa.func.min(grouped.c.s).label("s"),
            sa.func.max(grouped.c.e).label("e"),
        )
        .group_by(grouped.c.node, grouped.c.island)
        .subquery("islands")
    )
    edges = sa.union_all(
        *(sa.select((FIRST + i * BUCKET).label("k")) for i in range(CHUNK))
    ).subquery("edges")
    k, s, e = edges.c.k, islands.c.s, islands.c.e
    top = sa.case((e < k + BUCKET, e), else_=k + BUCKET)
    bottom = sa.case((s > k, s), else_=k)
    select = (
        sa.select(k, islands.c.node, sa.func.sum(top - bottom))
        .select_from(islands.join(edges, sa.and_(k < hi, e > k, s < k + BUCKET)))
        .group_by(k, islands.c.node)
    )
    return _upsert(BUSY, select, postgres)
