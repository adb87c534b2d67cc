"""The write-ahead journal: no finished request's record is lost when the process is killed.

Each gateway process appends to its own `journal-<pid>-<tag>.jsonl` (held under an exclusive
`flock` for the life of the process) one line per event, on the request path:

- `{"b": row}` when a stream's request has gone to its upstream (`begin`): its start;
- `{"f": row}` when a record is finished (`finish`): the relay hands a record on before the
  client sees the end of its answer, so the line is in the file before the answer is complete.

A line is copied into the file through a shared memory map (no system call, and the GIL is not
given up on the request path: a `write(2)` gave the record queue's thread the GIL and the event
loop waited up to a switch interval for it back). Once copied, the page cache has it, and a
SIGKILL, an OOM kill or a crash of the process loses nothing. The file's blocks are reserved
(`posix_fallocate`) before the map covers them, so a full disk fails the reservation (logged;
records then rely on the queue) and never a copy; the unused tail reads as zero bytes. `fsync`
policy: `interval` (the default) syncs the file from the record queue's thread at each of its
turns (every `flush_interval_s`, 0.2 s), so a crash of the whole machine loses at most that
much; `always` syncs on the request path before the line counts as written (the cost is in
`bench/ledger_journal.py`).

The record queue `settle`s a record once its row is in the store, the spool or the quarantine;
the journal keeps only the lines not yet settled in memory, and when the file passes
`max_bytes` it is rewritten with just those (write, fsync, rename: atomic). At start, a journal
whose `flock` is free belongs to a process that died: `recover` turns its unsettled lines into
rows (a finished record as it was; a begun stream with no finish as `status` 500,
`error_class` "Interrupted") for the spool, then deletes the file. Rows already in the store are
ignored on insert, so recovering a record twice is harmless.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

INTERRUPTED = "Interrupted"
_B, _F = b'{"b":', b'{"f":'
_FIRST = 1 << 20  # the first reservation; doubled as lines need it
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # (Linux)


class Journal:
    def __init__(self, folder: Path, *, fsync: str = "interval", max_bytes: int = 8 << 20):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.always = fsync == "always"
        self.max_bytes = max_bytes
        self.path = folder / f"journal-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._open: dict[str, bytes] = {}  # request id -> its last line, not yet settled
        self._lock = threading.Lock()
        self._size = 0  # bytes written: the next line's offset
        self._dirty = False
        self.failed = 0  # lines that could not be written (disk full); logged once
        self._fd = _locked(self.path)
        self._map: mmap.mmap | None
        self._map, self._cap = self._reserve(self._fd, None, 0, _FIRST)

    def begin(self, row: dict[str, Any]) -> None:
        self._put(row["request_id"], _B + orjson.dumps(row) + b"}\n")

    def finish(self, row: dict[str, Any]) -> None:
        self._put(row["request_id"], _F + orjson.dumps(row) + b"}\n")

    def _put(self, key: str, line: bytes) -> None:
        with self._lock:
            self._open[key] = line
            end = self._size + len(line)
            if end > self._cap:
                self._map, self._cap = self._reserve(self._fd, self._map, self._cap, end)
            if self._map is None:
                return  # no room: counted and logged by `_reserve`
            self._map[self._size : end] = line
            self._size = end
            self._dirty = True
            if self.always:
                self._sync_now()

    def _reserve(
        self, fd: int, old: mmap.mmap | None, cap: int, need: int
    ) -> tuple[mmap.mmap | None, int]:
        """`_mapped`, or (None, 0) when the disk has no room: counted and logged (the old map,
        if any, closed)."""
        try:
            return _mapped(fd, old, cap, need)
        except OSError as e:
            if old is not None:
                old.close()
            self._failed(e)
            return None, 0

    def _failed(self, e: OSError) -> None:
        self.failed += 1
        if self.failed == 1:
            log.error("record journal %s: %s; records rely on the queue", self.path, e)

    def _sync_now(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError:
            log.exception("record journal: fsync failed")

    def settle(self, keys: Iterable[str]) -> None:
        """These records' rows are in the store, the spool or the quarantine.

        Without the lock: each `pop` is atomic under the GIL, and `_rotate`, the one reader of
        the whole dict, copies its values in one C call (`bytes.join`), so it never sees one half
        done. Held here for a batch, the lock would stop the event loop's `_put`, which would then
        wait for the GIL too (up to the interpreter's switch interval, 5 ms) while the record
        queue's thread ran on."""
        pop = self._open.pop
        for key in keys:
            pop(key, None)

    @property
    def pending(self) -> int:
        return len(self._open)

    def sync(self) -> None:
        """The queue thread's turn: fsync what was appended, and rewrite a file grown past
        `max_bytes` with only the unsettled lines."""
        if self._dirty:
            self._dirty = False
            self._sync_now()  # the map's pages are the file's: fdatasync writes them
        if self._size > self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """The unsettled lines to a new file that takes the journal's name (rename: atomic).
        Under the lock only the copy and the rename, which is all a process crash needs; the
        new file reaches the disk at the next `sync` (at once with `always`)."""
        tmp = self.folder / f".{self.path.name}.tmp"
        with self._lock:
            fd = _locked(tmp)
            data = b"".join(self._open.values())
            new = None
            try:
                new, cap = _mapped(fd, None, 0, len(data))
                new[: len(data)] = data
                if self.always:
                    os.fdatasync(fd)
                os.rename(tmp, self.path)
            except OSError:
                if new is not None:
                    new.close()
                os.close(fd)
                log.exception("record journal: rewriting %s failed", self.path)
                return
            self._unmap()  # the old file is gone; its lock goes with its last reference
            self._fd, self._map, self._cap = fd, new, cap
            self._size, self._dirty = len(data), True

    def _unmap(self) -> None:
        if self._map is not None:
            self._map.close()  # the map holds the file (and its lock) too
        os.close(self._fd)

    def close(self) -> None:
        """After the queue has written or spooled everything: nothing left, no file left."""
        with self._lock:
            left = len(self._open)
            if not left:
                self.path.unlink(missing_ok=True)
            else:
                os.fsync(self._fd)
            self._unmap()
            self._map = None
        if left:
            log.warning("record journal %s keeps %d records for the next start", self.path, left)


def _mapped(fd: int, old: mmap.mmap | None, cap: int, need: int) -> tuple[mmap.mmap, int]:
    """Blocks reserved for at least `need` bytes of `fd`'s file (its size doubled from `cap`),
    then a map over them: `old` grown, or a new one. OSError when the disk has no room."""
    new = max(_FIRST, cap)
    while new < need:
        new *= 2
    os.posix_fallocate(fd, cap, new - cap)
    if old is not None:
        old.resize(new)
        return old, new
    # Its pages faulted in now, not one by one on the request path.
    return mmap.mmap(fd, new, flags=mmap.MAP_SHARED | _POPULATE), new


def _locked(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)  # read too: to be mapped
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def recover(folder: Path) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """Each journal of a dead process, with its unsettled rows; delete the file once its rows
    are safe (the caller spools them, then `Path.unlink`s it while the lock is held)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("journal-*.jsonl")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process is alive
            try:
                if os.fstat(fd).st_ino != os.stat(path).st_ino:
                    continue  # rewritten meanwhile: the new file is its owner's
            except FileNotFoundError:
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                written = f.read().split(b"\0", 1)[0]  # the reserved tail is zero bytes
            rows = _unsettled(written.splitlines())
            yield path, rows
        finally:
            os.close(fd)


def _unsettled(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    last: dict[str, tuple[bool, dict[str, Any]]] = {}
    for line in lines:
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:  # a line torn by the crash (never a finished one)
            continue
        finished = "f" in item
        row = item["f"] if finished else item.get("b")
        if not isinstance(row, dict) or "request_id" not in row:
            continue
        if finished or row["request_id"] not in last:
            last[row["request_id"]] = (finished, row)
    out = []
    for finished, row in last.values():
        if not finished:
            row = {**row, "status": 500, "error_class": INTERRUPTED, "finish_reason": None}
        out.append(row)
    return out
