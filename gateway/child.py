"""Child processes of a serving process: one-worker pools, started by `spawn`.

Work that would hold the GIL (a tokenizer's load, the store's upkeep) runs in a child of its
own, so the serving loop never waits for it. `child_pool` makes that child the same way for
every such use: one worker; started by `spawn`, never a fork of a process with a running event
loop and threads; the terminal's Ctrl-C ignored in it (its parent acts on it and ends the
child); then the use's own initializer, if any.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def _start(then: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if then is not None:
        then(*args)


def child_pool(
    initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = ()
) -> ProcessPoolExecutor:
    """A one-worker pool whose child is started by `spawn`, ignores Ctrl-C, and then runs
    `initializer(*initargs)` (a module-level function: the child is sent it by reference)."""
    return ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start,
        initargs=(initializer, initargs),
    )
