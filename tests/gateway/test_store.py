"""The record store on SQLite and on a real PostgreSQL server, and the record queue's spool."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.record import Attempt, Record
from gateway.store import DAY, REQUESTS, Content, RecordQueue, Store, record_row
from tests.gateway import pg


@pytest.fixture(scope="module")
def pg_admin() -> Iterator[str]:
    if pg.bin_dir() is None:
        pytest.skip("PostgreSQL server binaries absent: apt-get install postgresql")
    with pg.server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store("sqlite:///var/records.db", root=tmp_path)
    else:
        s = Store(pg.fresh_database(request.getfixturevalue("pg_admin")))
    yield s
    s.close()


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


def test_queue_writes_everything_by_close(store: Store, tmp_path: Path) -> None:
    q = RecordQueue(
        store, tmp_path / "spool", batch_size=64, flush_interval_s=0.01, store_content=True
    )
    for i in range(300):
        q.submit(full_record(f"q{i}"))
    q.submit_content(Content("q0", time.time(), "hi", "hello"))
    q.close()
    assert store.count() == 300
    assert store.count("contents") == 1
    assert q.stats.written == 300 and q.stats.dropped == 0


def test_content_is_not_kept_unless_configured(store: Store, tmp_path: Path) -> None:
    q = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.01)
    q.submit(full_record("c1"))
    q.submit_content(Content("c1", time.time(), "secret prompt", "answer"))
    q.close()
    assert store.count() == 1 and store.count("contents") == 0


def _lock(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


def _wait_for(predicate, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_spools_while_the_database_is_locked_and_replays_after(tmp_path: Path) -> None:
    store = Store("sqlite:///records.db", root=tmp_path, busy_timeout_s=0.05)
    locker = _lock(tmp_path / "records.db")
    q = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.01, retry_interval_s=0.05)
    try:
        for i in range(50):
            q.submit(full_record(f"s{i}"))
        assert q.flush()
        assert q.stats.spooled == 50 and q.stats.written == 0
        assert (tmp_path / "spool" / "spool.jsonl").exists()
        locker.execute("ROLLBACK")
        assert _wait_for(lambda: store.count() == 50)
        assert _wait_for(lambda: not list((tmp_path / "spool").glob("*.jsonl")))
    finally:
        locker.close()
        q.close()
        store.close()
    assert q.stats.replayed == 50


def test_spool_left_at_shutdown_is_replayed_by_the_next_start(tmp_path: Path) -> None:
    store = Store("sqlite:///records.db", root=tmp_path, busy_timeout_s=0.05)
    locker = _lock(tmp_path / "records.db")
    q = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.01, retry_interval_s=60)
    for i in range(20):
        q.submit(full_record(f"x{i}"))
    q.close()
    assert q.stats.spooled == 20 and store.count() == 0
    locker.execute("ROLLBACK")
    locker.close()
    q2 = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.01)
    try:
        assert _wait_for(lambda: store.count() == 20)
    finally:
        q2.close()
        store.close()


def test_a_full_queue_spools_instead_of_growing(tmp_path: Path) -> None:
    store = Store("sqlite:///records.db", root=tmp_path)
    q = RecordQueue(store, tmp_path / "spool", max_pending=5, flush_interval_s=0.01, start=False)
    for i in range(20):
        q.submit(full_record(f"o{i}"))  # the writer is not running: 5 queue, 15 overflow
    assert q.stats.overflowed == 15
    q.start()
    try:
        assert _wait_for(lambda: store.count() == 20)
    finally:
        q.close()
        store.close()


def test_unreachable_postgres_spools_and_the_next_start_replays(
    pg_admin: str, tmp_path: Path
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    dead = Store(
        f"postgresql://postgres@127.0.0.1:{dead_port}/postgres",
        run_migrations=False,
        busy_timeout_s=1,
    )
    q = RecordQueue(dead, tmp_path / "spool", flush_interval_s=0.01, retry_interval_s=60)
    for i in range(10):
        q.submit(full_record(f"p{i}"))
    q.close()
    dead.close()
    assert q.stats.spooled == 10 and q.stats.written == 0
    live = Store(pg.fresh_database(pg_admin))
    q2 = RecordQueue(live, tmp_path / "spool", flush_interval_s=0.01)
    try:
        assert _wait_for(lambda: live.count() == 10)
    finally:
        q2.close()
        live.close()
    assert q2.stats.replayed == 10


def _rows(store: Store, table: str) -> list[dict[str, object]]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))]


def test_workers_starting_together_all_migrate(tmp_path: Path) -> None:
    code = "import sys; from gateway.store import Store; Store(sys.argv[1]).close()"
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    root = Path(__file__).resolve().parents[2]
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
        assert version == "0002"
    finally:
        store.close()
