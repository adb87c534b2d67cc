"""The record store on SQLite and on a real PostgreSQL server (the `store` fixture: both)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.config import AccessConfig
from gateway.edge.access import Access, hash_key
from gateway.ledger.database import create_engine, migrate, resolve_url
from gateway.ledger.record import Attempt, Record
from gateway.ledger.rows import REQUESTS, metadata
from gateway.ledger.store import DAY, Content, Store, record_row
from tests.gateway import pg

VERSIONS = Path(__file__).resolve().parents[3] / "gateway" / "ledger" / "migrations" / "versions"


def full_record(request_id: str = "r1", t: float | None = None, **kw: object) -> Record:
    values: dict[str, object] = dict(
        request_id=request_id,
        door="chat",
        model="m",
        stream=True,
        time=time.time() if t is None else t,
        key_id="k1",
        lane="eval",
        upstream="u1",
        provider="DeepInfra",
        engine="vllm 0.32.0 template c410ab55bc15",
        attempts=[Attempt("u0", "http_503", 503, 0.01), Attempt("u1", "ok", 200, 0.5)],
        status=200,
        error_class=None,
        finish_reason="length",
        truncated=True,
        reasoning_leak=True,
        max_tokens=64,
        prompt_tokens=120,
        cached_tokens=100,
        completion_tokens=64,
        reasoning_tokens=40,
        usage_estimated=True,
        queue_s=0.001,
        ttft_s=0.2,
        ttfa_s=0.4,
        e2e_s=1.5,
        itl_mean_s=0.02,
        itl_p99_s=0.09,
        chunks=64,
        cost_usd=0.0012,
        charged_cost_usd=0.0013,
        params_hash="abc123",
        tool_calls=2,
    )
    values.update(kw)
    return Record(**values)  # type: ignore[arg-type]


def test_every_record_field_has_a_column() -> None:
    row = record_row(full_record())
    assert set(row) == {c.name for c in REQUESTS.columns}


def test_the_migrated_schema_is_the_models(store: Store) -> None:
    """Alembic's revisions build exactly the tables the code writes (a column added to the model
    without a revision, or the other way round, fails here)."""
    inspector = sa.inspect(store.engine)
    for table in metadata.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        assert have == {c.name for c in table.columns}, table.name


def test_round_trip(store: Store) -> None:
    record = full_record()
    store.write([record_row(record)])
    got = store.get("r1")
    assert got == record.as_row()


def test_writing_a_batch_twice_keeps_one_copy(store: Store) -> None:
    rows = [record_row(full_record(f"r{i}")) for i in range(5)]
    store.write(rows)
    store.write(rows)
    assert store.count() == 5


def test_usage_aggregates_per_model_and_upstream(store: Store) -> None:
    now = time.time()
    rows = [
        full_record("a", now, truncated=False, charged_cost_usd=None),
        full_record("b", now, status=502, error_class="UpstreamError", truncated=False),
        full_record("c", now, upstream="u2", cost_usd=None, charged_cost_usd=None),
        full_record("old", now - 3 * DAY),
    ]
    store.write([record_row(r) for r in rows])
    usage = {(u.model, u.upstream): u for u in store.usage(now - DAY)}
    assert set(usage) == {("m", "u1"), ("m", "u2")}
    u1 = usage["m", "u1"]
    assert (u1.requests, u1.prompt_tokens, u1.cached_tokens) == (2, 240, 200)
    assert (u1.completion_tokens, u1.reasoning_tokens) == (128, 80)
    assert u1.cost_usd == pytest.approx(0.0024)
    assert u1.charged_cost_usd == pytest.approx(0.0013)
    assert u1.charged_basis_usd == pytest.approx(0.0012)
    assert (u1.truncated, u1.errors, u1.estimated) == (0, 1, 2)
    assert usage["m", "u2"].cost_usd == 0.0


def test_retention_drops_whole_days(store: Store) -> None:
    now = time.time()
    ages = {"d40": 40, "d35": 35, "d29": 29, "d1": 1}
    store.write(
        [record_row(full_record(k, now - d * DAY)) for k, d in ages.items()],
        [Content(k, now - d * DAY, "p", "r").as_row() for k, d in ages.items()],
    )
    dropped = store.apply_retention(retention_days=30, content_retention_days=7, now=now)
    left = {r["request_id"] for r in _rows(store, "requests")}
    assert left == {"d29", "d1"}
    assert {r["request_id"] for r in _rows(store, "contents")} == {"d1"}
    assert dropped["requests"] >= 2 and dropped["contents"] >= 3
    if store.postgres:  # dropped days are gone as partitions, not as deleted rows
        with store.engine.connect() as conn:
            parts = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
                    "WHERE p.relname = 'requests'"
                )
            ).scalar()
        assert parts == 2


def test_relative_sqlite_path_is_resolved_against_root_and_in_wal_mode(tmp_path: Path) -> None:
    s = Store("sqlite:///deep/er/records.db", root=tmp_path)
    try:
        assert (tmp_path / "deep" / "er" / "records.db").exists()
        with s.engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        s.close()


def _rows(store: Store, table: str) -> list[dict[str, object]]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))]


def test_workers_starting_together_all_migrate(tmp_path: Path) -> None:
    code = "import sys; from gateway.ledger.store import Store; Store(sys.argv[1]).close()"
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    root = Path(__file__).resolve().parents[3]
    procs = [
        subprocess.Popen([sys.executable, "-c", code, url], cwd=root, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    store = Store(url, run_migrations=False)
    try:
        with store.engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        head = max(p.name[:4] for p in VERSIONS.glob("0*.py"))
        assert version is not None and version.split("_")[0] == head
    finally:
        store.close()


def _old_access_tables() -> sa.MetaData:
    """`keys` and `key_usage` as the access guard created them itself before revision 0009."""
    old = sa.MetaData()
    sa.Table(
        "keys",
        old,
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("models", sa.Text, nullable=True),
        sa.Column("requests_per_window", sa.Integer, nullable=True),
        sa.Column("tokens_per_window", sa.BigInteger, nullable=True),
        sa.Column("window_s", sa.Float, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("revoked", sa.Float, nullable=True),
    )
    sa.Table(
        "key_usage",
        old,
        sa.Column("key_id", sa.String(128), primary_key=True),
        sa.Column("window_start", sa.BigInteger, primary_key=True),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("tokens", sa.BigInteger, nullable=False),
    )
    return old


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_whose_guard_made_the_key_tables_migrates_keeping_them(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store from before 0009: alembic at 0008, the key tables made by the guard's own
    create_all, with a stored key and a budget window. Migrating keeps both, and the key
    still authenticates."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        url = pg.fresh_database(request.getfixturevalue("pg_admin"))
    engine = create_engine(resolve_url(url))
    migrate(engine, revision="0008")
    _old_access_tables().create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO keys (id, sha256, role, window_s, created) "
                "VALUES ('old', :h, 'client', 60, 1.0)"
            ),
            {"h": hash_key("pl-old-key")},
        )
        conn.execute(sa.text("INSERT INTO key_usage VALUES ('old', 600, 3, 42)"))
    engine.dispose()
    store = Store(url)
    access = Access(AccessConfig(store_keys=True), engine=store.engine)
    try:
        with store.engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        assert version is not None
        assert version.split("_")[0] == max(p.name[:4] for p in VERSIONS.glob("0*.py"))
        assert access.usage("old", 600) == (3, 42)
        found = asyncio.run(access.authenticate("pl-old-key"))
        assert found is not None and found.id == "old"
        inspector = sa.inspect(store.engine)
        for table in metadata.sorted_tables:
            have = {c["name"] for c in inspector.get_columns(table.name)}
            assert have == {c.name for c in table.columns}, table.name
    finally:
        access.close()
        store.close()


# ---- several gateways on one store -----------------------------------------------------------


def test_one_gateway_claims_each_scheduled_round(store: Store) -> None:
    hour = 3600.0
    assert store.claim_round(1000.0, hour, "a")
    assert not store.claim_round(1001.0, hour, "b")  # a round started a second ago
    assert store.claim_round(1000.0 + hour, hour, "b")  # an interval later
    store.finish_round(1000.0, 1500.0)
    rows = sorted(_rows(store, "eval_rounds"), key=lambda r: r["started"])  # type: ignore[arg-type, return-value]
    assert [(r["gateway"], r["finished"]) for r in rows] == [("a", 1500.0), ("b", None)]


def test_gateways_claiming_at_once_get_one_round(store: Store) -> None:
    """Eight gateways find the same round due at the same moment: exactly one runs it."""
    barrier = threading.Barrier(8)

    def claim(i: int) -> bool:
        barrier.wait()
        return store.claim_round(5000.0 + i / 1000, 3600.0, f"g{i}")

    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(claim, range(8)))
    assert sum(claimed) == 1 and len(_rows(store, "eval_rounds")) == 1


def test_gate_decisions_latest_per_model_and_history(store: Store) -> None:
    for t, model, chosen in [(1.0, "m", "a"), (2.0, "n", "x"), (3.0, "m", "b")]:
        store.record_decision(model, t, {"model": model, "chosen": chosen})
    latest, history = store.decisions(history=2)
    assert latest == {"m": {"model": "m", "chosen": "b"}, "n": {"model": "n", "chosen": "x"}}
    assert [d["chosen"] for d in history] == ["x", "b"]  # the newest two, oldest first


def test_shadow_budget_is_counted_across_gateways(store: Store) -> None:
    """Sixteen reservations at once against a limit of five: exactly five pass; the USD limit
    refuses once what finished has spent reaches it; a new UTC day starts afresh."""
    barrier = threading.Barrier(16)

    def reserve(_: int) -> bool:
        barrier.wait()
        return store.shadow_reserve("m", 100, 5, None)

    with ThreadPoolExecutor(16) as pool:
        assert sum(pool.map(reserve, range(16))) == 5
    assert store.shadow_reserve("m", 100, None, 0.01)  # no USD spent yet
    store.shadow_spent("m", 100, 0.004)
    store.shadow_spent("m", 100, 0.007)
    assert not store.shadow_reserve("m", 100, None, 0.01)
    assert store.shadow_reserve("m", 101, 5, 0.01) and store.shadow_reserve("other", 100, 1, None)
    [row] = [r for r in _rows(store, "shadow_usage") if r["model"] == "m" and r["day"] == 100]
    assert row["requests"] == 6 and row["usd"] == pytest.approx(0.011)


def test_shadow_usd_holds_are_counted_across_gateways(store: Store) -> None:
    """Sixteen reservations at once, each holding $0.002 against $0.01: exactly five pass, and
    settling gives back what a request held but did not spend."""
    barrier = threading.Barrier(16)

    def reserve(_: int) -> bool:
        barrier.wait()
        return store.shadow_reserve("h", 100, None, 0.01, 0.002)

    with ThreadPoolExecutor(16) as pool:
        assert sum(pool.map(reserve, range(16))) == 5
    assert not store.shadow_reserve("h", 100, None, 0.01, 0.002)
    store.shadow_spent("h", 100, 0.0005 - 0.002)  # one finished, having spent $0.0005
    assert store.shadow_reserve("h", 100, None, 0.01, 0.0015)
    [row] = [r for r in _rows(store, "shadow_usage") if r["model"] == "h"]
    assert row["requests"] == 6 and row["usd"] == pytest.approx(0.01)


def test_eval_results_are_kept_per_run(store: Store) -> None:
    """A scheduled run's scored items, read back by run id; a run kept twice is kept once."""
    items = [
        {"run": run, "target": "t", "item_digest": f"d{i}", "outcome": "correct", "engine": "e"}
        for run in ("r1", "r2")
        for i in range(3)
    ]
    store.write_eval_results(items[:3], 10.0)
    store.write_eval_results(items, 20.0)
    assert store.eval_results(["r1"]) == items[:3]
    assert sorted(r["item_digest"] for r in store.eval_results(["r1", "r2"])) == sorted(
        [f"d{i}" for i in range(3)] * 2
    )
    assert store.eval_results(["nope"]) == []


def test_demotions_are_shared_per_gateway_and_expire(store: Store) -> None:
    """Each gateway's rows replace its earlier ones; a gateway that stops refreshing them no
    longer demotes once they are older than the window asked for."""
    store.share_demotions("g1", {"a": ["truncation", "degenerate"]}, 100.0)
    store.share_demotions("g2", {"a": ["provider_mismatch"], "b": ["tool_call"]}, 100.0)
    assert store.demotions(since=50.0) == {
        "a": {"g1": ["truncation", "degenerate"], "g2": ["provider_mismatch"]},
        "b": {"g2": ["tool_call"]},
    }
    store.share_demotions("g1", {}, 160.0)  # g1 restored `a`
    store.share_demotions("g2", {"b": ["tool_call"]}, 160.0)
    assert store.demotions(since=110.0) == {"b": {"g2": ["tool_call"]}}
    assert store.demotions(since=170.0) == {}  # g2 went quiet
