"""What a thread did to files and processes while a test watched it (`io_on`): the file opens
and process starts that CPython's audit hooks report, for asserting that product code kept them
off the serving event loop's thread (a disk that holds a write, or a child slow to start, would
hold every request with them).

One audit hook serves every watch; it cannot be removed, so it returns at once when nothing is
watched."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

_EVENTS = frozenset({"open", "subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec"})
_watches: dict[int, list[tuple[str, str]]] = {}
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _watches or event not in _EVENTS:
        return
    seen = _watches.get(threading.get_ident())
    if seen is not None:
        seen.append((event, str(args[0]) if args else ""))


@contextlib.contextmanager
def io_on(thread: int) -> Iterator[list[tuple[str, str]]]:
    """(event, path or program) of each file open and process start on `thread` (an ident)
    while inside."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    seen: list[tuple[str, str]] = []
    _watches[thread] = seen
    try:
        yield seen
    finally:
        _watches.pop(thread, None)
