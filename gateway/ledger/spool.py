"""The queue between the request path and the store, and its spool on disk.

`RecordQueue.submit(record)` never blocks or raises; a background thread batches rows by size
and time into one transaction (`Store.write`); while the database is unreachable batches are
spooled to JSONL files (`Spool`) and replayed when it is back. The store ignores rows already
present, so a replay that repeats a batch is harmless.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import queue
import threading
import time as _time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.config import Config
from gateway.ledger.record import Record
from gateway.ledger.store import Store, record_row

log = logging.getLogger(__name__)


class ContentItem(Protocol):
    """What `submit_content` queues: anything that makes its `contents` row when asked."""

    def as_row(self) -> dict[str, Any]: ...


class Spool:
    """JSONL files of batches the store could not take, replayed when it is back.

    Every process appends to `spool.jsonl` under an exclusive `flock`, re-opening the file if it
    was renamed meanwhile. A replay first claims the file by renaming it (atomic, so two
    processes never replay the same file), waits for any append still holding the old inode,
    replays it, then deletes it. Claimed files of a process that died are claimed again.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "spool.jsonl"
        self._lock = threading.Lock()

    def append(self, rows: Sequence[dict[str, Any]], contents: Sequence[dict[str, Any]]) -> None:
        lines = [json.dumps({"requests": r}) for r in rows]
        lines += [json.dumps({"contents": c}) for c in contents]
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            while True:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    try:
                        same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                    except FileNotFoundError:
                        same = False
                    if same:
                        os.write(fd, data)
                        os.fsync(fd)
                        return
                finally:
                    os.close(fd)

    def pending(self) -> bool:
        return self.path.exists() or any(self._orphans())

    def _orphans(self) -> Iterator[Path]:
        for p in self.folder.glob("replaying-*.jsonl"):
            pid = int(p.name.split("-")[1])
            if pid == os.getpid() or not _alive(pid):
                yield p

    def claim(self) -> list[Path]:
        """Take every spooled file this process may replay (renamed to its own name)."""
        claimed = []
        for src in [self.path, *self._orphans()]:
            dst = self.folder / f"replaying-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            try:
                os.rename(src, dst)
            except FileNotFoundError:
                continue
            fd = os.open(dst, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # a writer holding the old inode finishes first
            finally:
                os.close(fd)
            claimed.append(dst)
        return claimed

    @staticmethod
    def read(path: Path, chunk: int) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """The file's rows and contents, `chunk` lines at a time (memory stays bounded)."""
        rows: list[dict[str, Any]] = []
        contents: list[dict[str, Any]] = []
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:  # a torn last line from a crash
                    log.warning("spool %s: skipping an unreadable line", path.name)
                    continue
                if "requests" in item:
                    rows.append(item["requests"])
                else:
                    contents.append(item["contents"])
                if len(rows) + len(contents) >= chunk:
                    yield rows, contents
                    rows, contents = [], []
        if rows or contents:
            yield rows, contents


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(slots=True)
class QueueStats:
    submitted: int = 0
    written: int = 0  # rows handed to the database in a committed batch (incl. replays)
    spooled: int = 0  # rows written to the spool because the database failed
    overflowed: int = 0  # rows spooled straight from submit() because the queue was full
    replayed: int = 0
    dropped: int = 0  # rows lost: even the spool failed (disk full); logged


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
        start: bool = True,
    ) -> None:
        self.store = store
        self.store_content = store_content
        self.spool = Spool(spool_dir)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_interval_s = retry_interval_s
        self.stats = QueueStats()
        self._q: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._down_until = 0.0
        self._spool_dirty = self.spool.pending()
        self._cv = threading.Condition()
        self._queued = 0  # items put on the queue
        self._handled = 0  # items written or spooled by the thread
        self._thread = threading.Thread(target=self._run, name="record-queue", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        self._thread.start()

    @classmethod
    def from_config(cls, config: Config, store: Store, **kw: Any) -> RecordQueue:
        """Spool under `<config folder>/var/spool`; content kept per `store.store_content`."""
        kw.setdefault("store_content", config.store.store_content)
        return cls(store, config.root / "var" / "spool", **kw)

    # -- request path ------------------------------------------------------------------

    def submit(self, record: Record) -> None:
        self._put(("r", record))

    def submit_content(self, content: ContentItem) -> None:
        """Queue a prompt/response pair (a `Content`, or the capture's `StoredContent`, turned
        into its row by the writer thread); ignored unless `store_content` is on."""
        if self.store_content:
            self._put(("c", content))

    def _put(self, item: tuple[str, Any]) -> None:
        try:
            self.stats.submitted += 1
            self._q.put_nowait(item)
            self._queued += 1
        except queue.Full:
            try:
                rows, contents = _convert([item])
                self.spool.append(rows, contents)
                self.stats.overflowed += 1
                self._spool_dirty = True
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
        stopping = False
        while not stopping:
            batch, stopping = self._take()
            try:
                if batch:
                    self._write(*_convert(batch))
                elif self._spool_dirty and _time.monotonic() >= self._down_until:
                    self._replay()
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

    def _take(self) -> tuple[list[tuple[str, Any]], bool]:
        try:
            first = self._q.get(timeout=self.flush_interval_s)
        except queue.Empty:
            return [], False
        if first is _STOP:
            return self._drain(), True
        # Let the batch gather while not waiting on the queue: a thread blocked in `get` is
        # woken (a futex call and a GIL hand-over) by every `put`, which cost the request path
        # about 100 µs a record at a few hundred requests a second.
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
                self.store.write(*part)
            except Exception as e:
                log.warning(
                    "store unavailable (%s); spooling to %s", type(e).__name__, self.spool.folder
                )
                self._down_until = _time.monotonic() + self.retry_interval_s
                self._to_spool(*part)
                continue
            self.stats.written += len(part[0])
            if self._spool_dirty:
                self._replay()

    def _to_spool(self, rows: list[dict[str, Any]], contents: list[dict[str, Any]]) -> None:
        try:
            self.spool.append(rows, contents)
            self.stats.spooled += len(rows)
            self._spool_dirty = True
        except Exception:
            self.stats.dropped += len(rows)
            log.exception("spool failed; %d records dropped", len(rows))

    def _replay(self) -> None:
        for path in self.spool.claim():
            n = 0
            try:
                for rows, contents in Spool.read(path, self.batch_size):
                    self.store.write(rows, contents)
                    n += len(rows)
            except Exception as e:
                log.warning(
                    "replay of %s failed (%s: %s); retrying later",
                    path.name,
                    type(e).__name__,
                    str(e)[:200],
                )
                self._down_until = _time.monotonic() + self.retry_interval_s
                self._spool_dirty = True
                return  # the claimed file stays and is claimed again (inserts are idempotent)
            path.unlink()
            self.stats.replayed += n
            self.stats.written += n
            log.info("replayed %d spooled records from %s", n, path.name)
        self._spool_dirty = self.spool.pending()


def _convert(items: Iterable[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, contents = [], []
    for kind, obj in items:
        if kind == "r":
            rows.append(record_row(obj))
        else:
            contents.append(obj.as_row())
    return rows, contents
