"""`report shadow` reads a window's shadow pairs through the partial index of the shadow rows'
times, not by reading every row of the window."""

from __future__ import annotations

import json

import sqlalchemy as sa

from gateway.config import Config
from gateway.ledger.store import Store, record_row
from gateway.reports.shadow import _shadow_query, report_shadow
from tests.gateway.ledger.test_store import full_record

NOW = 1_796_256_000.0


def _config() -> Config:
    ups = [
        {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "q"}
        for n in ("u1", "u2")
    ]
    return Config.model_validate({"upstreams": ups, "models": {"m": {"upstreams": ["u1"]}}})


def _fill(store: Store) -> None:
    """2,000 client rows in the last hour, 20 of them shadowed to u2 (half agreeing), and 5
    pairs the day before."""
    rows = []
    for i in range(2000):
        t = NOW - 3600 + i * 1.5
        rows.append(record_row(full_record(f"c{i}", t, lane="client", upstream="u1")))
        if i % 100 == 0:
            shadow = full_record(
                f"s{i}",
                t,
                lane="shadow",
                upstream="u2",
                shadow_of=f"c{i}",
                agreement="equal" if i % 200 == 0 else "different",
            )
            rows.append(record_row(shadow))
    for i in range(5):
        t = NOW - 86_400 - 600 + i
        rows.append(record_row(full_record(f"old{i}", t, lane="client", upstream="u1")))
        old = full_record(f"olds{i}", t, lane="shadow", upstream="u2", shadow_of=f"old{i}")
        rows.append(record_row(old))
    store.write(rows)


def test_a_windows_pairs_are_counted(store: Store) -> None:
    _fill(store)
    doc = json.loads(report_shadow(_config(), "1h", "json", store=store, now=NOW))
    [row] = doc["rows"]
    assert row["pairs"] == 20 and row["agreements"] == {"different": 10, "equal": 10}
    doc = json.loads(report_shadow(_config(), "2d", "json", store=store, now=NOW))
    assert sum(r["pairs"] for r in doc["rows"]) == 25


def test_the_shadow_rows_are_found_by_their_own_index(store: Store) -> None:
    _fill(store)
    names = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("requests")}
    assert "ix_requests_shadow_time" in names
    if store.postgres:
        return  # (its planner picks by statistics: a table this small is read whole)
    query = _shadow_query(NOW - 3600, NOW)
    sql = str(query.compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        plan = " ".join(str(r) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "ix_requests_shadow_time" in plan, plan
