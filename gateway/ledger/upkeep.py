"""The store's upkeep (rollups, retention) in a child process of its own.

The rollups' SQL runs in the database, but what is left in Python (building and sending the
statements, reading their answers; on SQLite the whole statement) needs the GIL, and a serving
process's event loop waits for whatever holds it: at 300 requests a second the requests during
a live bucket's rollup in housekeeping's thread took 1.0 ms more at the p99 than the quiet ones
on 2 cores, and nothing the p99 shows with the rollup in a child
(`bench/results/2026-12-04-housekeeping-request-latency.md`). A child process has a GIL of its
own, so the upkeep holder's loop waits on none of it.

`Upkeep` keeps one child (a one-worker `ProcessPoolExecutor`, started by `spawn`: never a fork
of a process with a running loop and threads), which opens the store once and then runs each
call it is sent, at a lower CPU priority. With `store.upkeep_process` on (the default; the
child and `multiprocessing`'s resource tracker cost about 86 MB resident), housekeeping
(`gateway/edge/housekeeping.py`) sends it the rollups and retention from its second upkeep run
on, so a gateway that lives less than one housekeeping interval never starts one. `close` ends
it, and one in the middle of a run is killed (its transaction rolls back; the next holder's run
does it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from gateway.child import child_pool
from gateway.ledger import rollups
from gateway.ledger.store import Store

if TYPE_CHECKING:
    from gateway.config import Config

# The child's nice value, as housekeeping's thread's (`gateway.edge.housekeeping`): its CPU, and
# SQLite's in it, yields to the serving processes on a busy machine.
UPKEEP_NICE = 10

_store: Store | None = None  # the child's own


def _begin(url: sa.URL, nice: int) -> None:
    """The child's start (after `child_pool`'s): a lower priority; the store opened (its
    migrations are the parent's)."""
    global _store
    with contextlib.suppress(OSError):
        os.nice(nice)
    _store = Store(url.render_as_string(hide_password=False), run_migrations=False)


def _child_store() -> Store:
    if _store is None:
        raise RuntimeError("the upkeep process has no store")
    return _store


def _pid() -> int:
    return os.getpid()


def _roll_up(nodes: dict[str, list[str]], max_hours: int) -> int:
    """`rollups.roll_up` on the child's store, as `Store.roll_up` does with the nodes' upstreams
    its config names (`rollups.node_upstreams`): the child is sent them, not the config."""
    return rollups.roll_up(_child_store().engine, nodes, time.time(), max_hours * rollups.CHUNK)


def _retention(*args: Any, **kwargs: Any) -> dict[str, int]:
    return _child_store().apply_retention(*args, **kwargs)


def in_memory(url: sa.URL) -> bool:
    """An SQLite store that lives in its process's memory: no other process can open it."""
    if url.get_backend_name() != "sqlite":
        return False
    db = url.database or ""
    return db in ("", ":memory:") or "mode=memory" in db or "mode=memory" in str(url.query)


class Upkeep:
    """One child process that runs the store's upkeep for the process that holds its lease."""

    def __init__(self, url: sa.URL, nice: int = UPKEEP_NICE) -> None:
        self._pool = child_pool(_begin, (url, nice))
        self.pid: int | None = None
        self._running: Future[Any] | None = None

    # The `Store` methods housekeeping calls, by the same names, run in the child.
    async def roll_up(self, config: Config, max_hours: int = 6) -> int:
        """`Store.roll_up(config)` in the child, which is sent the nodes' upstreams the config
        names (plain data); the buckets rolled up."""
        return int(await self._call(_roll_up, rollups.node_upstreams(config), max_hours))

    async def apply_retention(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """`Store.apply_retention(*args, **kwargs)` in the child."""
        result: dict[str, int] = await self._call(_retention, *args, **kwargs)
        return result

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.pid is None:
            self.pid = await asyncio.wrap_future(self._pool.submit(_pid))
        self._running = future = self._pool.submit(fn, *args, **kwargs)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """End the child: at once when idle, killed when a run is under way (a cancelled
        housekeeping run does not stop the child's)."""
        running = self._running is not None and not self._running.done()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if running and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
