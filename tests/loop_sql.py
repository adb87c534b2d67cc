"""No SQL on a running event loop: the gateway's store calls go to a thread.

On the serving loop a store call waits there for the database, up to its 5 s busy timeout when
another writer holds the lock, and every request on the process waits with it (a gate round's
decision did, until it went to a thread). Every statement any engine runs during a test is
checked: one that the product's async code ran on a thread whose event loop is running fails
that test. A test's own call is not checked (an async test may read a store directly), nor is a
database in the process's memory alone (the access checks' own, run inline by design: no other
writer can hold its lock).

Whose call it is: walking out from the statement, a coroutine of the product's (gateway/,
evals/, deploy/) met before any frame of `tests/` makes it the product's async code. A test's
own call meets a frame of `tests/` first, async or not (a sync test may run in a thread where a
loop runs, as playwright's sync API does).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
TESTS = str(ROOT / "tests") + "/"
PRODUCT = tuple(str(ROOT / name) + "/" for name in ("gateway", "evals", "deploy"))
_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_found: list[str] = []


def _the_products_async_code(frame: Any) -> bool:
    """Whether a coroutine of the product's is met before any frame of `tests/` (see the
    module)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(TESTS):
            return False
        if name.startswith(PRODUCT) and frame.f_code.co_flags & _ASYNC:
            return True
        frame = frame.f_back
    return False


@sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
def _not_on_a_running_loop(
    conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop runs in this thread
    if conn.engine.url.get_backend_name() == "sqlite" and conn.engine.url.database in (
        None,
        "",
        ":memory:",
    ):
        return  # a store in this process's memory alone: no other writer to wait for
    if not _the_products_async_code(sys._getframe(1)):
        return
    where = "".join(traceback.format_stack(limit=40)[:-1])
    _found.append(f"{statement.strip()[:80]!r} ran on the event loop's thread:\n{where}")


@pytest.fixture(autouse=True)
def no_sql_on_a_running_loop() -> Iterator[None]:
    """Fails the test in which product code ran SQL on a running event loop."""
    _found.clear()
    yield
    found, _found[:] = list(_found), []
    assert not found, found[0]
