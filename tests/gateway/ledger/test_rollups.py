"""The 5-minute rollups (`gateway.ledger.rollups`, filled in SQL by `gateway.ledger.rollup_sql`)
on SQLite and PostgreSQL: reports read from them answer what the raw scan answers on the same
varied rows (usage, node busy seconds, health counts and failed calls), housekeeping rolls up
only new buckets, late records are rolled up again, and retention drops the rollup rows."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.config import Config
from gateway.ledger.cost import Usage
from gateway.ledger.health_queries import attempts_query, failed_attempts
from gateway.ledger.partitions import DAY
from gateway.ledger.record import Attempt
from gateway.ledger.rollup_sql import BUCKET, BUSY_LOOKBACK, DIRTY, TABLES, failed_calls_select
from gateway.ledger.rollups import (
    BUSY_EDGE,
    HOUR,
    MAX_BUCKETS,
    SETTLE_S,
    STALE_S,
    busy_in,
    health_counts,
    node_upstreams,
)
from gateway.ledger.store import Store, record_row
from gateway.ledger.window import window_economics
from tests.gateway.ledger.test_store import full_record

T0 = 1_796_169_600.0  # a UTC midnight
UPSTREAMS = ["a", "b", "c", "api", None]


def config() -> Config:
    ups = [
        {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "q"}
        | ({"node": node} if node else {})
        for n, node in (("a", "box"), ("b", "box"), ("c", "other"), ("api", None))
    ]
    nodes = {n: {"cost_per_hour": 1.0} for n in ("box", "other", "idle")}
    models = {"m": {"upstreams": ["a", "b", "c", "api"]}, "n": {"upstreams": ["api"]}}
    return Config.model_validate({"upstreams": ups, "models": models, "nodes": nodes})


def _attempts(rng: random.Random, up: str | None, status: int) -> list[Attempt]:
    """Failed calls before the last one, on any upstream; the last one the record's."""
    outcomes = [("http_503", 503), ("timeout", None), ("http_429", 429), ("cancelled", None)]
    out = [
        Attempt(rng.choice(["a", "b", "c", "api"]), *rng.choice(outcomes), 0.1)
        for _ in range(rng.choice([0, 0, 0, 1, 2]))
    ]
    last = up or rng.choice(["a", "api"])
    outcome = "ok" if status == 200 else rng.choice([f"http_{status}", "ok"])
    return [*out, Attempt(last, outcome, status, 0.2)]


def varied(rng: random.Random, i: int, seed: int, t: float) -> dict[str, Any]:
    up = rng.choice(UPSTREAMS)
    status = rng.choice([200, 200, 200, 200, 429, 500, 400, 404])
    return record_row(
        full_record(
            f"r{seed}-{i}",
            t,
            model=rng.choice("mn"),
            upstream=up,
            status=status,
            error_class=rng.choice([None, None, "upstream_error"]) if status >= 500 else None,
            attempts=_attempts(rng, up, status),
            # Durations crossing bucket edges, overlapping on a node, shorter than BUSY_EDGE.
            e2e_s=rng.choice([None, 0.5, 30.0, 290.0, BUSY_EDGE - 10.0]),
            prompt_tokens=rng.randrange(1000),
            completion_tokens=rng.randrange(500),
            cost_usd=rng.choice([None, rng.random()]),
            charged_cost_usd=rng.choice([None, rng.random()]),
            truncated=rng.random() < 0.1,
            reasoning_leak=rng.random() < 0.05,
            stream=rng.random() < 0.7,
            sampled=rng.random() < 0.1,
            lane=rng.choice(["client", "client", "eval", "shadow"]),
        )
    )


def fill(store: Store, hours: float, n: int, seed: int = 3, start: float = T0) -> None:
    rng = random.Random(seed)
    rows = [varied(rng, i, seed, start + rng.uniform(0, hours * HOUR)) for i in range(n)]
    odd = dict(rows[0], request_id=f"odd-{seed}", status=502, upstream=None, error_class="x")
    rows.append(odd | {"attempts": '[1, {"upstream": 5}, {"upstream": "c"}]'})
    store.write(rows)


def same_usage(a: list[Usage], b: list[Usage]) -> None:
    keys = [(u.model, u.upstream, u.lane) for u in a]
    assert keys == [(u.model, u.upstream, u.lane) for u in b]
    for x, y in zip(a, b, strict=True):
        for field in list(x.__dataclass_fields__)[2:]:
            if field != "lane":
                assert getattr(x, field) == pytest.approx(getattr(y, field), rel=1e-9, abs=1e-12)


WINDOWS = [
    (T0 + 1234.5, T0 + 26 * HOUR + 77.0),  # ragged ends, many whole buckets
    (T0, T0 + 30 * HOUR),  # aligned to buckets
    (T0 + 5 * HOUR + 10, T0 + 5 * HOUR + 620),  # under the busy edges: raw only
    (T0 + 20 * HOUR + 1, T0 + 40 * HOUR),  # past the rolled-up buckets
    (T0 + 3 * HOUR + 299.0, T0 + 3 * HOUR + 3 * BUCKET + BUSY_EDGE + 2),  # one rolled bucket
]


def answers(store: Store, cfg: Config) -> list[Any]:
    out = []
    for s, u in WINDOWS:
        last: dict[str, tuple[str, float]] = {}
        with store.engine.connect() as conn:
            health = health_counts(conn, s, u, last)
        out.append((store.usage(s, u), store.node_hours(cfg, s, u), (*health, last)))
    return out


def same_answers(got: list[Any], want: list[Any]) -> None:
    for (usage, hours, health), (raw_usage, raw_hours, raw_health) in zip(got, want, strict=True):
        same_usage(usage, raw_usage)
        assert hours.keys() == raw_hours.keys()
        for node, value in raw_hours.items():
            assert hours[node] == pytest.approx(value, rel=1e-9, abs=1e-9)
        assert health == raw_health


def test_rolled_up_reports_answer_what_the_raw_scan_answers(store: Store) -> None:
    cfg = config()
    fill(store, 30, 4000)
    raw = answers(store, cfg)
    assert store.roll_up(cfg, T0 + 30 * HOUR + SETTLE_S, max_hours=100) == 30 * HOUR // BUCKET
    same_answers(answers(store, cfg), raw)
    usage, hours, (flags, failed, last) = raw[0]
    assert usage and hours["box"] > 1.0 and flags and sum(failed.values()) > 100 and last


def test_failed_calls_in_sql_are_the_python_rule(store: Store) -> None:
    fill(store, 2, 1500, seed=9)
    query = failed_calls_select(T0, T0 + 2 * HOUR, store.postgres, bucketed=False)
    with store.engine.connect() as conn:
        python = failed_attempts(conn.execute(attempts_query(T0, T0 + 2 * HOUR)))
        sql = {u: int(n) for u, n in conn.execute(query)}
    assert sql == dict(python) and python["c"] > 0


def test_housekeeping_rolls_up_only_the_buckets_completed_since_the_last_time(
    store: Store,
) -> None:
    cfg = config()
    fill(store, 3, 300)
    per_hour = HOUR // BUCKET
    assert store.roll_up(cfg, T0 + 2 * HOUR + SETTLE_S) == 2 * per_hour
    assert store.roll_up(cfg, T0 + 2 * HOUR + SETTLE_S + 50) == 0  # nothing new: no re-walk
    assert store.roll_up(cfg, T0 + 3 * HOUR + SETTLE_S) == per_hour


def test_late_records_are_rolled_up_again(store: Store) -> None:
    """Records written into buckets already rolled up (a spool replayed after an outage) mark
    them dirty, and the next tick rolls them up again with the upsert."""
    cfg = config()
    fill(store, 6, 600)
    assert store.roll_up(cfg, T0 + 6 * HOUR + SETTLE_S, max_hours=100) == 6 * HOUR // BUCKET
    fill(store, 6, 500, seed=4)  # the replayed spool: into every rolled-up bucket
    below = sa.select(sa.func.count()).where(DIRTY.c.bucket < T0 + 6 * HOUR)
    with store.engine.connect() as conn:
        assert conn.execute(below).scalar() == 6 * HOUR // BUCKET
    assert store.roll_up(cfg, T0 + 6 * HOUR + SETTLE_S + 60, max_hours=100) == 6 * HOUR // BUCKET
    assert store.roll_up(cfg, T0 + 6 * HOUR + SETTLE_S + 120) == 0
    with store.engine.connect() as conn:  # what is left: the buckets past the mark, not late
        assert conn.execute(below).scalar() == 0
    windows = [(T0 + 100.0, T0 + 6 * HOUR - 100), (T0, T0 + 6 * HOUR)]
    got = [(store.usage(s, u), store.node_hours(cfg, s, u)) for s, u in windows]
    assert sum(u.requests for u in got[1][0]) == store.count() == 1102
    with store.engine.connect() as conn:  # the raw scan's answers, past the rollups
        conn.execute(sa.text("DELETE FROM rollup_marks"))
        conn.commit()
    raw = [(store.usage(s, u), store.node_hours(cfg, s, u)) for s, u in windows]
    for (usage, hours), (raw_usage, raw_hours) in zip(got, raw, strict=True):
        same_usage(usage, raw_usage)
        assert hours == pytest.approx(raw_hours, rel=1e-9)


def test_the_minute_gauges_read_the_last_day_of_rolled_up_buckets(store: Store) -> None:
    """The economics every process recomputes each minute: over the last 24 h of rolled-up
    buckets, the usage of requests that started in them and the nodes' busy time inside them
    (requests that started up to BUSY_LOOKBACK before count their part inside); the exact
    window when the rollups are missing or stale."""
    cfg = config()
    fill(store, 30, 3000)
    assert store.roll_up(cfg, T0 + 30 * HOUR + SETTLE_S, max_hours=100) == 30 * HOUR // BUCKET
    now = T0 + 30 * HOUR + SETTLE_S + 45
    assert store.settled_span(DAY, now) == (T0 + 6 * HOUR, T0 + 30 * HOUR)
    usage, hours, econ = window_economics(cfg, store, DAY, now, settled=True)
    same_usage(usage, store.usage(T0 + 6 * HOUR, T0 + 30 * HOUR))
    with store.engine.connect() as conn:
        for node, ups in node_upstreams(cfg).items():
            inside = busy_in(
                conn,
                ups,
                (T0 + 6 * HOUR - BUSY_LOOKBACK, T0 + 30 * HOUR),
                (T0 + 6 * HOUR, T0 + 30 * HOUR),
            )
            assert hours[node] == pytest.approx(inside / 3600, rel=1e-9, abs=1e-9), node
    assert hours["box"] > 1.0 and econ
    # What the database was asked: bucket rows only, no scan of `requests`.
    asked: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute", lambda *a: asked.append(a[2]))
    window_economics(cfg, store, DAY, now, settled=True)
    assert asked and not [q for q in asked if "FROM requests" in q], asked
    # No rollup for longer than STALE_S (nobody holds the upkeep lease): the exact window.
    later = T0 + 30 * HOUR + STALE_S + 1
    assert store.settled_span(DAY, later) is None
    stale = window_economics(cfg, store, DAY, later, settled=True)
    exact = window_economics(cfg, store, DAY, later)
    same_usage(stale[0], exact[0])
    assert stale[1] == pytest.approx(exact[1], rel=1e-9)


def test_a_first_rollup_of_a_long_history_is_spread_over_ticks(store: Store) -> None:
    cfg = config()
    fill(store, 4, 100)
    per_hour = HOUR // BUCKET
    assert store.roll_up(cfg, T0 + 100 * HOUR, max_hours=10) == 10 * per_hour
    assert store.roll_up(cfg, T0 + 100 * HOUR, max_hours=10) == 10 * per_hour
    assert store.roll_up(cfg, T0 + 100 * HOUR) == MAX_BUCKETS  # a housekeeping tick's share


def test_retention_drops_the_rollups_of_the_days_it_drops(store: Store) -> None:
    cfg = config()
    fill(store, 72, 900)
    assert store.roll_up(cfg, T0 + 72 * HOUR + SETTLE_S, max_hours=100) > 800
    dropped = store.apply_retention(1, 1, now=T0 + 2 * DAY + 600)
    assert dropped["requests"] == 1
    with store.engine.connect() as conn:
        for table in TABLES:
            oldest = conn.execute(sa.select(sa.func.min(table.c.bucket))).scalar()
            assert oldest is not None and oldest >= T0 + DAY, table.name
    same_usage(store.usage(T0, T0 + 3 * DAY), store.usage(T0 + DAY, T0 + 3 * DAY))


def test_rolled_up_health_report_is_the_raw_one(store: Store) -> None:
    from gateway.reports.health import report_health

    cfg = config()
    fill(store, 30, 2000, seed=5)
    store.write([record_row(full_record("failed-only", T0 + 7 * HOUR, upstream=None, status=502))])
    now = T0 + 27 * HOUR + 61.0
    raw = [report_health(cfg, w, "json", store=store, now=now) for w in ("24h", "1h")]
    assert store.roll_up(cfg, T0 + 30 * HOUR + SETTLE_S, max_hours=100) == 30 * HOUR // BUCKET
    assert [report_health(cfg, w, "json", store=store, now=now) for w in ("24h", "1h")] == raw
