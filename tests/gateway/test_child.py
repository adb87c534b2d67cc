"""`child_pool`: one spawned child that ignores Ctrl-C and runs its use's initializer."""

from __future__ import annotations

import os
import signal
from typing import Any

from gateway.child import child_pool

_set_here = "the parent's"  # a spawned child imports the module afresh: it never sees a change


def _remember(value: str) -> None:
    global _set_here
    _set_here = value


def _state() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "sigint": signal.getsignal(signal.SIGINT),
        "set_here": _set_here,
    }


def test_the_child_is_spawned_ignores_ctrl_c_and_runs_the_initializer() -> None:
    global _set_here
    _set_here = "changed in the parent"  # a fork would carry this over
    pool = child_pool(_remember, ("set by the initializer",))
    try:
        first = pool.submit(_state).result(timeout=60)
        again = pool.submit(_state).result(timeout=60)
    finally:
        pool.shutdown()
        _set_here = "the parent's"
    assert first["pid"] != os.getpid() and first["parent"] == os.getpid()
    assert again["pid"] == first["pid"]  # one worker, kept
    assert first["sigint"] == signal.SIG_IGN
    assert first["set_here"] == "set by the initializer"


def test_without_an_initializer_the_child_starts_from_a_fresh_import() -> None:
    global _set_here
    _set_here = "changed in the parent"
    pool = child_pool()
    try:
        state = pool.submit(_state).result(timeout=60)
    finally:
        pool.shutdown()
        _set_here = "the parent's"
    assert state["set_here"] == "the parent's"
    assert state["sigint"] == signal.SIG_IGN
