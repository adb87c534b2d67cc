"""SQLite retention in short transactions (`gateway.ledger.sweep`): the same rows as one DELETE,
and a writer on the same database keeps writing while a day is deleted."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.ledger import responses_store, sweep
from gateway.ledger.partitions import DAY, day_start
from gateway.ledger.record import Record
from gateway.ledger.store import Store, record_row

NOW = 1_796_256_000.0 + 3600.0  # 2026-12-03 01:00 UTC


def rows(times: list[float], prefix: str = "r") -> list[dict[str, object]]:
    template = record_row(Record(request_id="x", door="chat", model="m", stream=False, time=0.0))
    return [template | {"request_id": f"{prefix}{i}", "time": t} for i, t in enumerate(times)]


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path}/records.db")
    yield s
    s.close()


def times_of(store: Store, table: str = "requests") -> list[float]:
    with store.engine.connect() as conn:
        return [t for (t,) in conn.exec_driver_sql(f"SELECT time FROM {table} ORDER BY time")]


def test_delete_before_takes_exactly_the_older_rows_in_many_chunks(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = NOW - DAY
    times = [end - 5000 + i for i in range(5000)] + [end + i for i in range(500)]
    lite.write(rows(times))
    asked: list[int] = []
    chunked = sweep.chunked

    def counting(engine: sa.Engine, step: Callable[[sa.Connection, int], int], **kw: float) -> int:
        def counted(conn: sa.Connection, n: int) -> int:
            asked.append(n)
            return step(conn, n)

        return chunked(engine, counted, hold_s=kw["hold_s"], pause_s=0.0, first=100)

    monkeypatch.setattr(sweep, "chunked", counting)
    assert sweep.delete_before(lite.engine, "requests", "time", end) == 5000
    assert times_of(lite) == [end + i for i in range(500)]
    assert len(asked) > 3 and all(n <= sweep.MAX_CHUNK for n in asked)


def test_retention_on_sqlite_keeps_the_day_granularity(lite: Store) -> None:
    old = day_start(NOW) - 40 * DAY
    # Three old days (the third ends after the cut-off: kept whole), one recent row.
    times = [old + d * DAY + s for d in range(3) for s in (0.0, 3600.0, DAY - 0.001)]
    lite.write(rows([*times, NOW - 10]), [])
    with lite.engine.begin() as conn:  # refusals age out with the requests
        conn.exec_driver_sql(
            "INSERT INTO rejections (time, request_id, reason, status, door, lane, key_id) "
            "VALUES (?, 'old', 'r', 429, 'chat', 'client', 'k'), "
            "(?, 'new', 'r', 429, 'chat', 'client', 'k')",
            (old, NOW - 10),
        )
    cutoff = old + 2 * DAY + 100.0  # days 0 and 1 ended by it, day 2 did not
    dropped = lite.apply_retention(retention_days=1, content_retention_days=1, now=cutoff + DAY)
    assert dropped["requests"] == 2
    assert times_of(lite) == [
        old + 2 * DAY,
        old + 2 * DAY + 3600.0,
        old + 3 * DAY - 0.001,
        NOW - 10,
    ]
    with lite.engine.connect() as conn:
        left = [r for (r,) in conn.exec_driver_sql("SELECT request_id FROM rejections")]
    assert left == ["new"]


def test_retention_stopped_half_way_counts_only_the_days_wholly_gone(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store closing mid-sweep (its `closing` event) ends the delete between two chunks:
    the days reported dropped are those with no row left, and the next run deletes the rest."""
    old = day_start(NOW) - 40 * DAY
    lite.write(rows([old + d * DAY + s for d in range(3) for s in range(0, 3000, 10)]))
    chunked = sweep.chunked

    def one_day_then_close(
        engine: sa.Engine, step: Callable[[sa.Connection, int], int], **kw: object
    ) -> int:
        def stepping(conn: sa.Connection, n: int) -> int:
            done = step(conn, 400)  # the first day's 300 rows and 100 of the second's
            lite.closing.set()
            return done

        return chunked(engine, stepping, hold_s=1.0, pause_s=0.0, stop=lite.closing)

    monkeypatch.setattr(sweep, "chunked", one_day_then_close)
    assert lite.drop_before("requests", old + 3 * DAY) == 1
    assert times_of(lite)[0] == old + DAY + 1000
    lite.closing.clear()
    monkeypatch.setattr(sweep, "chunked", chunked)
    assert lite.drop_before("requests", old + 3 * DAY) == 2
    assert times_of(lite) == []


def test_a_writer_keeps_writing_while_a_big_day_is_deleted(tmp_path: Path) -> None:
    """150 k rows of an old day go while a second store on the same file (another gateway
    process's record queue) writes a batch after another with a busy timeout of 0.25 s: one
    DELETE of the day holds SQLite's write lock longer than that and the writer fails; in
    chunks every one of its batches goes in, and several go in before the delete ends."""
    url = f"sqlite:///{tmp_path}/records.db"
    store = Store(url)
    writer = Store(url, busy_timeout_s=0.25, run_migrations=False)
    old = day_start(NOW) - 10 * DAY
    n = 150_000
    for lo in range(0, n, 25_000):
        store.write(rows([old + i * DAY / n for i in range(lo, lo + 25_000)]))
    done, during, errors = threading.Event(), [0], []

    def write() -> None:
        k = 0
        while not done.is_set():
            try:
                writer.write(rows([NOW - 1 + k * 1e-3 + j * 1e-6 for j in range(30)], f"w{k}-"))
            except sa.exc.OperationalError as exc:
                errors.append(exc)
                return
            during[0] += 1
            k += 1
            time.sleep(0.01)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        dropped = store.drop_before("requests", old + DAY)
    finally:
        done.set()
        thread.join()
    try:
        assert dropped == 1
        assert errors == []
        assert during[0] >= 5  # the writer went on while the day was deleted
        assert store.count() == 30 * during[0]
        assert min(times_of(store)) >= NOW - 1
    finally:
        writer.close()
        store.close()


def test_stored_responses_purge_in_chunks(lite: Store) -> None:
    for i in range(1200):
        responses_store.save(
            lite.engine,
            rid=f"resp_{i}",
            key_id="",
            door="responses",
            created=float(i),
            body={"id": f"resp_{i}"},
            outputs=[{"type": "message"}],
        )
    assert responses_store.purge(lite.engine, 1000.0) == 1000
    with lite.engine.connect() as conn:
        ids = conn.exec_driver_sql("SELECT count(*) FROM stored_responses").scalar()
        items = conn.exec_driver_sql("SELECT count(*) FROM stored_items").scalar()
    assert ids == 200 and items == 200


def test_free_pages_go_back_only_when_they_are_most_of_the_file(lite: Store) -> None:
    lite.write(rows([NOW - 3 * DAY + i for i in range(20_000)]))
    lite.write(rows([NOW - 10 + i * 1e-3 for i in range(2_000)], "n"))

    def pragma(name: str) -> int:
        with lite.engine.connect() as conn:
            return int(conn.exec_driver_sql(f"PRAGMA {name}").scalar() or 0)

    sweep.delete_before(lite.engine, "requests", "time", NOW - 3 * DAY + 5_000, pause_s=0.0)
    assert 0 < pragma("freelist_count") <= sweep.RELEASE_SHARE * pragma("page_count")
    assert sweep.release_pages(lite.engine, pause_s=0.0) == 0  # reused by the next rows
    sweep.delete_before(lite.engine, "requests", "time", NOW - DAY, pause_s=0.0)
    pages, free = pragma("page_count"), pragma("freelist_count")
    assert free > sweep.RELEASE_SHARE * pages
    assert sweep.release_pages(lite.engine, pause_s=0.0) == free
    assert pragma("freelist_count") == 0 and pragma("page_count") == pages - free
    assert lite.count() == 2_000
