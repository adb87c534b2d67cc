"""Retention on SQLite in short transactions, so writers are never held for long.

SQLite has one write lock per database: a `DELETE` of a whole day (864 k rows at 10 requests a
second, 26 M at 300) holds every writer -- the record queue of each gateway process -- for the
whole delete (3 s, then minutes), past the busy timeout. Here the rows go in chunks: each chunk
is one short `BEGIN IMMEDIATE` transaction deleting a bounded number of rows (picked by rowid
from the `time` index, oldest first), sized so that it holds the lock about `HOLD_S`; between
two chunks the sweep sleeps at least `PAUSE_S`, longer than the gaps between a waiting writer's
retries (SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms …), so a writer that found the
lock taken gets it at its next retry. A writer's batch thus waits one chunk at most, tens of
milliseconds, instead of the whole day.

The result is the same rows as one `DELETE … WHERE time < end`: every row older than `end` is
gone when `delete_before` returns (a chunk smaller than asked for means none was left), and no
newer one is touched. The freed pages stay on SQLite's free list for the next days' rows, unless
they are over half the file (retention lowered, traffic fallen): then they go back to the file
system the same way, as many per `PRAGMA incremental_vacuum(N)` as take about `HOLD_S`
(`release_pages`).

PostgreSQL needs none of this: its retention drops day partitions (`Store._drop_partitions`),
and its deletes (rejections, stored responses) do not block inserts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gateway.ledger.database import writing
from gateway.ledger.partitions import DAY, day_start

HOLD_S = 0.01  # what one chunk should hold the write lock
PAUSE_S = 0.03  # the least sleep between two chunks (a waiting writer's retries are <= 25 ms)
FIRST_CHUNK = 500  # rows in the first chunk; later chunks are sized from the time they took
MAX_CHUNK = 20_000
FIRST_PAGES = 50  # pages freed by the first incremental vacuum; then sized like the chunks
MAX_PAGES = 2_000
# Free pages are returned only while they are over this share of the file (retention lowered,
# traffic fallen): a day's pages freed in the steady state are reused by the next day's rows.
RELEASE_SHARE = 0.5


def chunked(
    engine: Engine,
    step: Callable[[Connection, int], int],
    *,
    hold_s: float = HOLD_S,
    pause_s: float = PAUSE_S,
    first: int = FIRST_CHUNK,
    stop: threading.Event | None = None,
) -> int:
    """Run `step(conn, n)` (delete at most `n` rows; how many it did) each in its own write
    transaction until one does fewer than asked, sizing `n` to hold the lock about `hold_s`
    and sleeping between two; the rows deleted in all. A set `stop` (the store closing) ends
    it between two chunks: what is left goes at the next retention."""
    total, n = 0, first
    while stop is None or not stop.is_set():
        with writing(engine) as conn:  # BEGIN IMMEDIATE: the lock is held from here
            t0 = time.perf_counter()
            done = step(conn, n)
        took = time.perf_counter() - t0  # the lock held (not the wait for it)
        total += done
        if engine.dialect.name == "sqlite":
            checkpoint(engine)
        if done < n:
            return total
        rate = done / max(took, 1e-4)  # rows a second, this chunk
        n = max(50, min(MAX_CHUNK, int(rate * hold_s), 2 * n))
        time.sleep(max(pause_s, took))
    return total


def checkpoint(engine: Engine) -> None:
    """Copy the write-ahead log into the database now, without waiting on or blocking writers
    (PASSIVE). A chunk's pages would otherwise pile up in the log until a commit passes
    SQLite's auto-checkpoint size -- often a writer's, which then copies them all."""
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        conn.rollback()


def delete_before(
    engine: Engine,
    table: str,
    column: str,
    end: float,
    *,
    hold_s: float = HOLD_S,
    pause_s: float = PAUSE_S,
    stop: threading.Event | None = None,
) -> int:
    """Delete every row of `table` whose `column` is below `end`, in short transactions
    (`chunked`); the rows deleted. `column` must lead an index (the primary key for the
    record tables) so that each chunk finds its rows without a scan."""
    sql = sa.text(
        f"DELETE FROM {table} WHERE rowid IN "
        f"(SELECT rowid FROM {table} WHERE {column} < :end ORDER BY {column} LIMIT :n)"
    )

    def step(conn: Connection, n: int) -> int:
        return int(conn.execute(sql, {"end": end, "n": n}).rowcount or 0)

    return chunked(engine, step, hold_s=hold_s, pause_s=pause_s, stop=stop)


def delete_days(engine: Engine, table: str, cutoff: float, stop: threading.Event | None) -> int:
    """Every whole day of `table` that ended by `cutoff` deleted (`delete_before`), then its
    pages released; the days wholly gone, fewer when `stop` ended the sweep half-way (the rest
    goes at the next retention)."""
    oldest = _oldest(engine, table)
    first = day_start(oldest) if oldest is not None else cutoff
    days = max(0, int((cutoff - first) // DAY))
    if not days:
        return 0
    end = first + days * DAY  # every whole day from the oldest one's to the last by `cutoff`
    delete_before(engine, table, "time", end, stop=stop)
    left = _oldest(engine, table)
    if left is not None and left < end:
        return int((day_start(left) - first) // DAY)
    release_pages(engine, stop=stop)
    return days


def _oldest(engine: Engine, table: str) -> float | None:
    with engine.connect() as conn:
        oldest = conn.exec_driver_sql(f"SELECT min(time) FROM {table}").scalar()
    return None if oldest is None else float(oldest)


def release_pages(
    engine: Engine,
    hold_s: float = HOLD_S,
    pause_s: float = PAUSE_S,
    stop: threading.Event | None = None,
) -> int:
    """Return the free pages to the file system when they are over `RELEASE_SHARE` of it, a
    transaction at a time sized (as `chunked` sizes its chunks) to hold the lock about `hold_s`:
    moving a page costs more in a fragmented file. A database made before
    auto_vacuum=INCREMENTAL has none to return. The pages released."""
    released, n = 0, FIRST_PAGES
    raw = engine.raw_connection()
    try:
        db: Any = raw.driver_connection  # the sqlite3 connection, in autocommit (database.py)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        if db.execute("PRAGMA freelist_count").fetchone()[0] <= RELEASE_SHARE * pages:
            return 0  # the next days' rows reuse them: no file to shrink and grow again
        while stop is None or not stop.is_set():
            before = db.execute("PRAGMA freelist_count").fetchone()[0]
            t0 = time.perf_counter()
            # The pragma frees one page a step, and the sqlite3 module's execute steps once:
            # a script steps every statement to its end.
            db.executescript(f"BEGIN IMMEDIATE; PRAGMA incremental_vacuum({int(n)}); COMMIT;")
            took = time.perf_counter() - t0
            after = db.execute("PRAGMA freelist_count").fetchone()[0]
            released += before - after
            if after == 0 or after >= before:  # nothing left, or nothing to do (no auto_vacuum)
                return released
            rate = (before - after) / max(took, 1e-4)
            n = max(10, min(MAX_PAGES, int(rate * hold_s), 2 * n))
            checkpoint(engine)
            time.sleep(max(pause_s, took))
        return released
    finally:
        raw.close()
