"""The queue between the request path and the store, and its spool on disk.

`RecordQueue.submit(record)` never blocks or raises: it makes the record's typed row
(`gateway.ledger.fast_row`), appends it to the process's journal (`gateway.ledger.journal`: a
SIGKILL loses no finished record) and queues it. A background thread batches rows by size and
time into one transaction; a row the database refuses is quarantined alone and the rest of its
batch written (`gateway.ledger.quarantine`); while the database is unreachable batches are
spooled to JSONL files (`Spool`) and replayed when it is back, chunk by chunk, each chunk
sorted the same way, so a replay always makes progress. The store ignores rows already
present, so a replay that repeats a batch is harmless.
"""

from __future__ import annotations

import logging
import queue
import threading
import time as _time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.config import Config
from gateway.ledger.fast_row import row_of
from gateway.ledger.journal import Journal, recover
from gateway.ledger.quarantine import StoreAway, quarantined, write_sorted
from gateway.ledger.record import Record
from gateway.ledger.spoolfile import Spool
from gateway.ledger.store import Store

log = logging.getLogger(__name__)


class ContentItem(Protocol):
    """What `submit_content` queues: anything that makes its `contents` row when asked."""

    def as_row(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class QueueStats:
    submitted: int = 0
    written: int = 0  # rows handed to the database in a committed batch (incl. replays)
    spooled: int = 0  # rows written to the spool because the database failed
    overflowed: int = 0  # rows spooled straight from submit() because the queue was full
    replayed: int = 0
    dropped: int = 0  # rows lost: even the spool failed (disk full); logged
    quarantined: int = 0  # rows this process set aside (the store refused them)
    recovered: int = 0  # rows taken from dead processes' journals into the spool
    # Gauges for /health and the metrics, refreshed by the queue thread: request rows waiting
    # in the spool folder, and rows in the store's quarantine (every gateway's).
    spool_rows: int = 0
    quarantine_rows: int = 0


_STOP = object()


class RecordQueue:
    """A `RecordSink` that writes records to the store from a background thread.

    `submit` puts the record on a bounded queue and returns; it never blocks on the database and
    never raises. The thread converts records to rows and writes them in batches of up to
    `batch_size` rows or `flush_interval_s` seconds. If a write fails the batch goes to the spool
    and the database is tried again after `retry_interval_s`; once a write succeeds the spool is
    replayed. If the queue is full (the database is slower than the traffic), `submit` appends
    the row to the spool itself instead of growing memory. `close()` writes or spools everything
    still queued; nothing is lost on a graceful shutdown.
    """

    def __init__(
        self,
        store: Store,
        spool_dir: Path,
        *,
        batch_size: int = 500,
        flush_interval_s: float = 0.2,
        max_pending: int = 10_000,
        retry_interval_s: float = 2.0,
        store_content: bool = False,
        journal: bool = True,
        journal_fsync: str = "interval",
        start: bool = True,
    ) -> None:
        self.store = store
        self.store_content = store_content
        self.spool = Spool(spool_dir)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_interval_s = retry_interval_s
        self.stats = QueueStats()
        # A `SimpleQueue` (C, a quarter of `Queue`'s cost a put, on the request path), bounded
        # by `_put`'s own check against `max_pending`.
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.max_pending = max_pending
        self._down_until = 0.0
        self._spool_dirty = self.spool.pending()
        self._cv = threading.Condition()
        self._queued = 0  # items put on the queue
        self._handled = 0  # items written or spooled by the thread
        self.journal = Journal(spool_dir / "journal", fsync=journal_fsync) if journal else None
        self._counted = 0.0  # when the gauges were last refreshed (monotonic)
        self.gauges: Any = None  # a `gateway.ledger.backlog.Backlog` to keep up to date
        self._thread = threading.Thread(target=self._run, name="record-queue", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        self._thread.start()

    @classmethod
    def from_config(cls, config: Config, store: Store, **kw: Any) -> RecordQueue:
        """Spool under `<config folder>/var/spool`; content kept per `store.store_content`."""
        kw.setdefault("store_content", config.store.store_content)
        kw.setdefault("journal_fsync", config.store.journal_fsync)
        return cls(store, config.root / "var" / "spool", **kw)

    # -- request path ------------------------------------------------------------------

    def begin(self, record: Record) -> None:
        """A stream has started: its start goes to the journal (a crash leaves it recorded as
        interrupted). Never raises."""
        if self.journal is not None:
            try:
                self.journal.begin(row_of(record))
            except Exception:
                log.exception("journalling a stream's start failed")

    def submit(self, record: Record) -> None:
        """The finished record: journalled (in the kernel when this returns), then queued."""
        try:
            row = row_of(record)
        except Exception:
            self.stats.dropped += 1
            log.exception("record %s could not be made a row", record.request_id)
            return
        if self.journal is not None:
            self.journal.finish(row)
        self._put(("r", row))

    def submit_content(self, content: ContentItem) -> None:
        """Queue a prompt/response pair (a `Content`, or the capture's `StoredContent`, turned
        into its row by the writer thread); ignored unless `store_content` is on."""
        if self.store_content:
            self._put(("c", content))

    def _put(self, item: tuple[str, Any]) -> None:
        try:
            self.stats.submitted += 1
            if self._q.qsize() >= self.max_pending:
                raise queue.Full
            self._q.put_nowait(item)
            self._queued += 1
        except queue.Full:
            try:
                rows, contents = _convert([item])
                self.spool.append(rows, contents)
                self.stats.overflowed += 1
                self._spool_dirty = True
                self._settle(rows)
            except Exception:
                self.stats.dropped += 1
                log.exception("record queue full and spool failed; record dropped")
        except Exception:
            self.stats.dropped += 1
            log.exception("record dropped")

    # -- lifecycle ---------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is written or spooled (tests, benchmarks)."""
        target = self._queued
        with self._cv:
            return self._cv.wait_for(lambda: self._handled >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        if not self._thread.is_alive():
            return
        self._q.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("record queue did not finish within %.0fs", timeout)

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        self._recover()
        stopping = False
        while not stopping:
            batch, stopping = self._take()
            try:
                if batch:
                    self._write(*_convert(batch))
                elif self._spool_dirty and _time.monotonic() >= self._down_until:
                    self._replay()
                self._housekeep()
            except Exception:
                log.exception("record queue: unexpected error")
            with self._cv:
                self._handled += len(batch)
                self._cv.notify_all()
        if self._spool_dirty and _time.monotonic() >= self._down_until:
            try:
                self._replay()
            except Exception:
                log.exception("record queue: replay at close failed")
        if self.journal is not None:
            self.journal.close()

    def _housekeep(self) -> None:
        """Each turn: the journal synced; every few seconds the gauges counted again and the
        journals of processes that died (a sibling worker) recovered."""
        if self.journal is not None:
            self.journal.sync()
        now = _time.monotonic()
        if now - self._counted >= COUNT_EVERY_S:
            self._counted = now
            self._recover()

    def _recover(self) -> None:
        """Rows of dead processes' journals to the spool (replayed like any other), and the
        gauges counted."""
        if self.journal is not None:
            for path, rows in recover(self.journal.folder):
                try:
                    self.spool.append(rows, [])
                except Exception:
                    log.exception("recovering %s failed; kept for the next start", path.name)
                    continue
                path.unlink(missing_ok=True)
                self.stats.recovered += len(rows)
                self._spool_dirty = self._spool_dirty or bool(rows)
                log.warning("recovered %d records from %s (a process died)", len(rows), path.name)
        self._count()

    def _count(self) -> None:
        try:
            self.stats.spool_rows = self.spool.rows()
            if _time.monotonic() >= self._down_until:
                self.stats.quarantine_rows = quarantined(self.store)
            if self.gauges is not None:
                self.gauges.update(self.stats)
        except Exception as e:
            log.debug("counting the ledger's backlog failed: %s", e)

    def _take(self) -> tuple[list[tuple[str, Any]], bool]:
        try:
            first = self._q.get(timeout=self.flush_interval_s)
        except queue.Empty:
            return [], False
        if first is _STOP:
            return self._drain(), True
        # Let the batch gather while not waiting on the queue: a thread blocked in `get` is
        # woken (a futex call and a GIL hand-over) by every `put`, a cost on the request path
        # for every record.
        if self._q.qsize() < self.batch_size - 1:  # a full batch is already waiting
            _time.sleep(self.flush_interval_s)
        batch = [first]
        while len(batch) < self.batch_size:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch + self._drain(), True
            batch.append(item)
        return batch, False

    def _drain(self) -> list[tuple[str, Any]]:
        items: list[tuple[str, Any]] = []
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return items
            if item is not _STOP:
                items.append(item)

    def _write(self, rows: list[dict[str, Any]], contents: list[dict[str, Any]]) -> None:
        for i in range(0, max(len(rows), len(contents)), self.batch_size):
            part = rows[i : i + self.batch_size], contents[i : i + self.batch_size]
            if _time.monotonic() < self._down_until:
                self._to_spool(*part)
                continue
            try:
                done = write_sorted(self.store, *part)
            except StoreAway as e:
                log.warning("store unavailable (%s); spooling to %s", e, self.spool.folder)
                self._down_until = _time.monotonic() + self.retry_interval_s
                left = {id(r) for r in e.left[0]}
                self._settle([r for r in part[0] if id(r) not in left])
                self._sorted(e.done)
                self._to_spool(*e.left)
                continue
            self._settle(part[0])
            self._sorted(done)
            if self._spool_dirty:
                self._replay()

    def _sorted(self, done: Any) -> None:
        self.stats.written += done.rows
        if done.quarantined:
            self.stats.quarantined += done.quarantined
            self._count()

    def _settle(self, rows: Iterable[dict[str, Any]]) -> None:
        if self.journal is not None:
            self.journal.settle(r["request_id"] for r in rows)

    def _to_spool(self, rows: list[dict[str, Any]], contents: list[dict[str, Any]]) -> None:
        try:
            self.spool.append(rows, contents)
            self.stats.spooled += len(rows)
            self._spool_dirty = True
            self._settle(rows)
        except Exception:
            self.stats.dropped += len(rows)
            log.exception("spool failed; %d records dropped", len(rows))

    def _replay(self) -> None:
        """Each claimed file chunk by chunk, each chunk written as `_write` does: a row the store
        refuses is quarantined, so a file always makes progress. If the store goes away the
        file is kept and claimed again later (the chunks already written are ignored then)."""
        for path in self.spool.claim():
            n = 0
            try:
                for rows, contents in Spool.read(path, self.batch_size):
                    done = write_sorted(self.store, rows, contents)
                    self.stats.quarantined += done.quarantined
                    n += done.rows
            except StoreAway as e:
                self.stats.quarantined += e.done.quarantined
                log.warning("replay of %s stopped (%s); retrying later", path.name, e)
                self._down_until = _time.monotonic() + self.retry_interval_s
                self._spool_dirty = True
                return
            path.unlink()
            self.stats.replayed += n
            self.stats.written += n
            log.info("replayed %d spooled records from %s", n, path.name)
        self._spool_dirty = self.spool.pending()
        self._count()


COUNT_EVERY_S = 5.0


def _convert(items: Iterable[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Queued items as rows: a record's row was made by `submit`; contents make theirs here."""
    rows, contents = [], []
    for kind, obj in items:
        if kind == "r":
            rows.append(obj)
        else:
            contents.append(obj.as_row())
    return rows, contents
