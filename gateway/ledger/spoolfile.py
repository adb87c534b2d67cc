"""The spool: JSONL files of rows the store could not take yet, replayed when it is back
(`gateway.ledger.spool.RecordQueue` writes and replays them)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


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
        self._counted: dict[Path, tuple[int, int, int]] = {}  # path -> (inode, bytes, rows)

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

    def rows(self) -> int:
        """How many request rows wait in the folder's files (every process's). Files only
        grow by whole lines, so a file counted before is read on from where it ended."""
        n = 0
        counted: dict[Path, tuple[int, int, int]] = {}
        for p in self.folder.glob("*.jsonl"):
            try:
                with p.open("rb") as f:
                    st = os.fstat(f.fileno())
                    ino = st.st_ino
                    offset, rows = 0, 0
                    seen = self._counted.get(p)
                    if seen is not None and seen[0] == ino and seen[1] <= st.st_size:
                        offset, rows = seen[1], seen[2]
                        f.seek(offset)
                    for line in f:
                        if not line.endswith(b"\n"):
                            break  # a line being written: counted next time
                        offset += len(line)
                        rows += line.startswith(b'{"requests"')
            except FileNotFoundError:
                continue
            counted[p] = (ino, offset, rows)
            n += rows
        self._counted = counted
        return n

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
