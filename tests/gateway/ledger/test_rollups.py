"""The hourly rollups (`gateway.ledger.rollups`) on SQLite and PostgreSQL: reports read from them
answer what the raw scan answers on the same data, and housekeeping rolls up only new hours."""

from __future__ import annotations

import random

import pytest

from gateway.config import Config
from gateway.ledger.cost import Usage
from gateway.ledger.queries import usage_query
from gateway.ledger.rollups import HOUR, MAX_HOURS, SETTLE_S
from gateway.ledger.store import Store, record_row
from tests.gateway.ledger.test_store import full_record

T0 = 1_796_169_600.0  # a UTC midnight


def config() -> Config:
    ups = [
        {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "q"}
        | ({"node": node} if node else {})
        for n, node in (("a", "box"), ("b", "box"), ("c", "other"), ("api", None))
    ]
    nodes = {n: {"cost_per_hour": 1.0} for n in ("box", "other", "idle")}
    models = {"m": {"upstreams": ["a", "b", "c", "api"]}, "n": {"upstreams": ["api"]}}
    return Config.model_validate({"upstreams": ups, "models": models, "nodes": nodes})


def fill(store: Store, hours: int, n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        t = T0 + rng.uniform(0, hours * HOUR)
        up = rng.choice(["a", "b", "c", "api", None])
        rows.append(
            full_record(
                f"r{seed}-{i}",
                t,
                model=rng.choice("mn"),
                upstream=up,
                status=rng.choice([200, 200, 200, 429, 500]),
                e2e_s=rng.choice([None, 0.5, 30.0, 400.0, 1800.0]),
                prompt_tokens=rng.randrange(1000),
                completion_tokens=rng.randrange(500),
                cost_usd=rng.choice([None, rng.random()]),
                charged_cost_usd=rng.choice([None, rng.random()]),
                truncated=rng.random() < 0.1,
                lane=rng.choice(["client", "client", "eval", "shadow"]),
            )
        )
    store.write([record_row(r) for r in rows])


def same_usage(a: list[Usage], b: list[Usage]) -> None:
    keys = [(u.model, u.upstream, u.lane) for u in a]
    assert keys == [(u.model, u.upstream, u.lane) for u in b]
    for x, y in zip(a, b, strict=True):
        for field in list(x.__dataclass_fields__)[2:]:
            if field != "lane":
                assert getattr(x, field) == pytest.approx(getattr(y, field), rel=1e-9, abs=1e-12)


WINDOWS = [
    (T0 + 1234.5, T0 + 26 * HOUR + 77.0),  # ragged ends, many whole hours
    (T0, T0 + 30 * HOUR),  # aligned to hours
    (T0 + 5 * HOUR + 10, T0 + 6 * HOUR + 20),  # under two hours: raw only
    (T0 + 20 * HOUR + 1, T0 + 40 * HOUR),  # past the rolled-up hours
]


def test_rolled_up_reports_answer_what_the_raw_scan_answers(store: Store) -> None:
    cfg = config()
    fill(store, 30, 3000)
    raw = [(store.usage(s, u), store.node_hours(cfg, s, u)) for s, u in WINDOWS]
    now = T0 + 30 * HOUR + SETTLE_S
    assert store.roll_up(cfg, now, max_hours=100) == 30
    for (s, u), (usage, hours) in zip(WINDOWS, raw, strict=True):
        same_usage(store.usage(s, u), usage)
        rolled = store.node_hours(cfg, s, u)
        assert rolled.keys() == hours.keys()
        for node, value in hours.items():
            assert rolled[node] == pytest.approx(value, rel=1e-9, abs=1e-9)
    assert raw[0][1]["box"] > 1.0 and raw[0][0]


def test_housekeeping_rolls_up_only_the_hours_completed_since_the_last_time(store: Store) -> None:
    cfg = config()
    fill(store, 3, 300)
    assert store.roll_up(cfg, T0 + 2 * HOUR + SETTLE_S) == 2
    assert store.roll_up(cfg, T0 + 2 * HOUR + SETTLE_S + 50) == 0  # nothing new: no re-walk
    assert store.roll_up(cfg, T0 + 3 * HOUR + SETTLE_S) == 1
    # Records arriving later are counted in their hours when those are rolled up; those that
    # land in hours already rolled up are not (the documented cost of rolling up once).
    fill(store, 5, 400, seed=4)
    assert store.roll_up(cfg, T0 + 9 * HOUR) == 5  # hours 3..7
    late = sum(u.requests for u in store.usage(T0 + 3 * HOUR, T0 + 5 * HOUR))
    with store.engine.connect() as conn:
        raw = sum(int(r[2]) for r in conn.execute(usage_query(T0 + 3 * HOUR, T0 + 5 * HOUR)))
    assert late == raw > 0
    assert sum(u.requests for u in store.usage(T0, T0 + 5 * HOUR)) < 700 == store.count()


def test_a_first_rollup_of_a_long_history_is_spread_over_ticks(store: Store) -> None:
    cfg = config()
    fill(store, 4, 100)
    assert store.roll_up(cfg, T0 + 100 * HOUR, max_hours=10) == 10
    assert store.roll_up(cfg, T0 + 100 * HOUR, max_hours=10) == 10
    assert store.roll_up(cfg, T0 + 100 * HOUR) == MAX_HOURS  # a housekeeping tick's share


def test_rolled_up_health_report_is_the_raw_one(store: Store) -> None:
    from gateway.reports.health import report_health

    cfg = config()
    fill(store, 30, 2000, seed=5)
    store.write([record_row(full_record("failed-only", T0 + 7 * HOUR, upstream=None, status=502))])
    now = T0 + 27 * HOUR + 61.0
    raw = [report_health(cfg, w, "json", store=store, now=now) for w in ("24h", "1h")]
    assert store.roll_up(cfg, T0 + 30 * HOUR + SETTLE_S, max_hours=100) == 30
    assert [report_health(cfg, w, "json", store=store, now=now) for w in ("24h", "1h")] == raw
