"""The record queue between the request path and the store, and its spool on disk: nothing
is lost while the database is locked, unreachable or slower than the traffic."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Content, Store
from tests.gateway import pg
from tests.gateway.ledger.test_store import full_record


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


def _next_start_replays(store: Store, spool: Path, n: int) -> RecordQueue:
    """A new queue on the same spool (the next start) writes the `n` spooled records; the store
    is closed after."""
    queue = RecordQueue(store, spool, flush_interval_s=0.01)
    try:
        assert _wait_for(lambda: store.count() == n)
    finally:
        queue.close()
        store.close()
    return queue


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
    _next_start_replays(store, tmp_path / "spool", 20)


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
    assert _next_start_replays(live, tmp_path / "spool", 10).stats.replayed == 10


def test_the_spool_counts_the_rows_waiting_in_it(tmp_path: Path) -> None:
    from gateway.ledger.spoolfile import Spool

    spool = Spool(tmp_path)
    spool.append([{"request_id": "a"}] * 3, [{"request_id": "a"}])  # contents are not counted
    assert spool.rows() == 3
    spool.append([{"request_id": "b"}] * 2, [])
    assert spool.rows() == 5  # read on from where the last count ended
    with spool.path.open("ab") as f:
        f.write(b'{"requests": {"request_id"')  # a line still being written
    assert spool.rows() == 5
    [claimed] = spool.claim()
    assert spool.rows() == 5
    claimed.unlink()
    assert spool.rows() == 0
