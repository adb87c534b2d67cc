"""A gateway's background work: the health prober, the minute's housekeeping, shared demotions.

`Prober` asks every upstream for its health each `server.health_interval_s` (and the engines
it has not heard from what they serve); `Demotions` shares the watchdog's demotions between the
gateways on one store, so each routes around an upstream any of them demoted; `Housekeeper` runs
each `store.housekeeping_interval_s` (a minute) with a store: the gate decisions other gateways
recorded, the demotions, the rollups, the node-vs-API economics for the metrics, and once an hour
the retention. Each is given what it uses, nothing of the app besides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.ledger import lease
from gateway.ledger.partitions import DAY
from gateway.ledger.upkeep import Upkeep, in_memory
from gateway.ledger.window import window_economics
from gateway.serving.upstream import probe
from gateway.trust.gate import GateBook, SharedGateBook

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.ledger.metrics import Metrics
    from gateway.ledger.store import Store
    from gateway.serving.engine import Engines
    from gateway.serving.pool import Pool
    from gateway.serving.wire import Wire
    from gateway.trust.watchdog import Watchdog

log = logging.getLogger("plumbline")
# A gateway's demotion holds for the others this long after its last refresh (each minute).
DEMOTION_TTL_S = 180.0
# Retention runs at a gateway's first housekeeping and then at most this often.
RETENTION_EVERY_S = 3600.0
# The store's upkeep (rollups, retention) is one process's: the holder of this lease, which
# lapses this long after its holder's last run when the holder is gone.
UPKEEP_LEASE = "upkeep"
UPKEEP_TTL_S = 150.0
R = TypeVar("R")
# The nice value of housekeeping's thread (Linux): the database work it waits on runs on a CPU
# of the process (SQLite in the thread itself), which on a busy machine the event loop needs.
HOUSEKEEPING_NICE = 10


def lower_priority() -> None:
    """Give the calling thread the lower scheduling priority `HOUSEKEEPING_NICE` (Linux, where
    a thread has its own nice value; elsewhere, and where refused, it keeps the process's)."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + HOUSEKEEPING_NICE
        )


class Task:
    """One background task, started once and cancelled (and awaited) at stop."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        self._task = asyncio.create_task(work)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Prober:
    """Health of every upstream, asked each interval, into routing and the metrics."""

    def __init__(
        self,
        config: Config,
        wire: Wire,
        engines: Engines,
        set_health: Callable[[str, bool], None],
        serving: Callable[[], Callable[[str], bool]],
    ) -> None:
        self.config = config
        self.wire = wire
        self.engines = engines
        self.set_health = set_health  # routing's and the metrics' view of an upstream
        self.serving = serving  # which engines their supervisor says are serving
        self._task = Task()

    def start(self) -> None:
        if self.config.server.health_interval_s > 0:
            self._task.start(self._forever())

    async def stop(self) -> None:
        await self._task.stop()

    async def probe_all(self) -> None:
        timeout = min(5.0, self.config.server.connect_timeout_s * 2)
        upstreams = self.config.upstreams
        results = await asyncio.gather(*(probe(self.wire, u, timeout) for u in upstreams))
        due = []
        serving = self.serving()
        for upstream, ok in zip(upstreams, results, strict=True):
            # An engine its supervisor is restarting may answer before it is ready.
            ok = ok and serving(upstream.name)
            self.set_health(upstream.name, ok)
            if self.engines.due(upstream, ok):
                due.append(upstream)
        if due:
            await self.engines.learn(self.wire, due, timeout)

    async def _forever(self) -> None:
        while True:
            try:
                await self.probe_all()
            except Exception:  # a probe must never kill the prober
                log.exception("health probe failed")
            await asyncio.sleep(self.config.server.health_interval_s)


class Demotions:
    """The watchdog's demotions, shared through the store: routing demotes an upstream this
    gateway's watchdog or another gateway's on the same store demoted."""

    def __init__(self, gateway_id: str, pool: Pool, store: Store | None) -> None:
        self.gateway_id = gateway_id
        self.pool = pool
        self.store = store
        # Set once the watchdog exists (it calls `changed` back).
        self.watchdog: Watchdog | None = None
        # Demotions other gateways on the store hold (upstream -> {gateway: checks}).
        self.elsewhere: dict[str, dict[str, list[str]]] = {}
        self.sharing: set[asyncio.Task[None]] = set()

    def changed(self, upstream: str, demoted: bool) -> None:
        """The watchdog demoted or restored `upstream`: routing follows it (or another
        gateway's demotion), and the store hears of it now rather than at the next minute."""
        self._route(upstream)
        if self.store is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self.share())
        except RuntimeError:  # no loop here: housekeeping shares it within the minute
            return
        self.sharing.add(task)
        task.add_done_callback(self.sharing.discard)

    async def share(self, now: float | None = None) -> None:
        """Publish this gateway's demotions and take up every other gateway's: an upstream any
        gateway on the store demoted (within `DEMOTION_TTL_S`) is routed around here too."""
        if self.store is None or self.watchdog is None:
            return
        now = time.time() if now is None else now
        mine = self.watchdog.demotions()
        try:
            await asyncio.to_thread(self.store.share_demotions, self.gateway_id, mine, now)
            rows = await asyncio.to_thread(self.store.demotions, now - DEMOTION_TTL_S)
        except Exception:
            log.exception("watchdog demotions could not be shared through the store")
            return
        me = self.gateway_id
        elsewhere = {u: {g: c for g, c in by.items() if g != me} for u, by in rows.items()}
        self.elsewhere = {u: by for u, by in elsewhere.items() if by}
        for name in self.pool.states:
            self._route(name)

    def by(self, upstream: str) -> list[str]:
        """The gateways whose watchdogs demote `upstream`: this one first, then the others."""
        here = [self.gateway_id] if self.watchdog and upstream in self.watchdog.demoted else []
        return here + sorted(self.elsewhere.get(upstream, {}))

    async def drain(self) -> None:
        """Demotions on their way to the store get there (before it closes)."""
        if self.sharing:
            await asyncio.gather(*self.sharing, return_exceptions=True)

    def _route(self, upstream: str) -> None:
        here = self.watchdog is not None and upstream in self.watchdog.demoted
        self.pool.set_demoted(upstream, here or upstream in self.elsewhere)


class Housekeeper:
    """Every `store.housekeeping_interval_s` (a minute): reload the gate decisions other gateways
    on the store recorded, share the demotions, publish node-vs-API economics. The store's
    upkeep is done once for all the processes on it, by the holder of the upkeep lease
    (`gateway.ledger.lease`): roll up at each run, apply retention at its first upkeep run and
    then once an hour; with `store.upkeep_process` (the default), in a child process from its
    second upkeep run on (`gateway.ledger.upkeep`). Each run logs what its parts took."""

    def __init__(
        self,
        config: Config,
        store: Store,
        gate_book: GateBook | SharedGateBook,
        demotions: Demotions,
        metrics: Metrics,
        holder: str = "",
    ) -> None:
        self.config = config
        self.store = store
        self.gate_book = gate_book
        self.demotions = demotions
        self.metrics = metrics
        self.holder = holder or f"{id(self):x}"
        self.upkeep_ticks = 0  # the runs this process did the store's upkeep
        self._retained: float | None = None  # when this process last applied retention
        self._task = Task()
        # Its own thread, at a lower priority: the store's work never runs on the event loop,
        # never takes a thread the request path's own `to_thread` calls need, and on a busy
        # machine yields the CPU to the loop. Made at the first run, ended at stop.
        self._executor: ThreadPoolExecutor | None = None
        # The upkeep's own process, started at the second upkeep run, ended at stop.
        self._child: Upkeep | None = None

    @property
    def upkeep_pid(self) -> int | None:
        """The upkeep's child process, once it has run there."""
        return None if self._child is None else self._child.pid

    def start(self) -> None:
        self._task.start(self._forever())

    async def stop(self) -> None:
        """Stop; give the upkeep lease up, so another process takes it over at once."""
        await self._task.stop()
        if self.upkeep_ticks:
            try:
                await asyncio.to_thread(lease.release, self.store.engine, UPKEEP_LEASE, self.holder)
            except Exception:
                log.exception("the upkeep lease could not be given up; it lapses on its own")
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        child, self._child = self._child, None
        if child is not None:
            child.close()

    async def _forever(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.config.store.housekeeping_interval_s)

    async def tick(self, *, hourly: bool | None = None) -> None:
        """One run; `hourly` forces retention on or off (by default: when an hour is up)."""
        if isinstance(self.gate_book, SharedGateBook):
            try:
                await asyncio.to_thread(self.gate_book.refresh)
            except Exception:
                log.exception("gate decisions could not be read from the store")
        await self.demotions.share()
        took: dict[str, float] = {}
        try:
            await self._store_work(took, hourly=hourly)
        finally:  # also when stopped half-way (cancelled): what ran, and for how long
            parts = ", ".join(f"{name} {s:.3f} s" for name, s in took.items())
            log.info("housekeeping took %.3f s (%s)", sum(took.values()), parts)

    def _retention_due(self, hourly: bool | None) -> bool:
        if hourly is not None:
            return hourly
        last = self._retained
        return last is None or time.monotonic() - last >= RETENTION_EVERY_S

    async def _store_work(self, took: dict[str, float], *, hourly: bool | None) -> None:
        try:
            upkeep = await self._timed(
                took,
                "lease",
                lease.hold,
                self.store.engine,
                UPKEEP_LEASE,
                self.holder,
                time.time(),
                UPKEEP_TTL_S,
            )
            if upkeep:
                self.upkeep_ticks += 1
                await self._upkeep(took, "rollups", "roll_up", self.config)
            # The last day of rolled-up buckets: no raw row (gateway/ledger/window.py).
            settled = partial(window_economics, settled=True)
            economics = await self._timed(took, "economics", settled, self.config, self.store, DAY)
            self.metrics.set_economics(economics[2])
            if upkeep and self._retention_due(hourly):
                self._retained = time.monotonic()
                s = self.config.store
                kept = s.retention_days, s.content_retention_days
                await self._upkeep(
                    took,
                    "retention",
                    "apply_retention",
                    *kept,
                    responses_retention_days=s.responses_retention_days,
                    rollup_retention_days=s.rollup_retention_days,
                )
        except Exception:
            log.exception("store housekeeping failed")

    def _upkeep_child(self) -> Upkeep | None:
        """The child process for this upkeep run, or None where it runs in the thread: the
        first upkeep run, `store.upkeep_process` off, an in-memory SQLite store."""
        wanted = self.upkeep_ticks > 1 and self.config.store.upkeep_process
        if self._child is None and wanted and not in_memory(self.store.url):
            self._child = Upkeep(self.store.url)
            log.info(
                "the store's upkeep runs in a child process from now on (store.upkeep_process)"
            )
        return self._child

    async def _upkeep(
        self, took: dict[str, float], name: str, method: str, *args: Any, **kwargs: Any
    ) -> Any:
        """The store's `method(*args, **kwargs)` (`roll_up`, `apply_retention`), in the upkeep's
        child process where there is one (`Upkeep` has both, by the same names), else in
        housekeeping's thread; timed as `name`."""
        child = self._upkeep_child()
        if child is None:
            return await self._timed(
                took, name, partial(getattr(self.store, method), **kwargs), *args
            )
        try:
            return await _clocked(took, name, getattr(child, method)(*args, **kwargs))
        except BrokenProcessPool:  # the child died (killed, out of memory): a new one next run
            self._child = None
            child.close()
            raise

    async def _timed(
        self, took: dict[str, float], name: str, fn: Callable[..., R], *args: Any
    ) -> R:
        """`fn(*args)` in housekeeping's thread, timed."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                1, thread_name_prefix="plumbline-housekeeping", initializer=lower_priority
            )
        work = asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        return await _clocked(took, name, work)


async def _clocked(took: dict[str, float], name: str, work: Awaitable[R]) -> R:
    """`work` awaited, its seconds put in `took` under `name` (also when it fails)."""
    t0 = time.perf_counter()
    try:
        return await work
    finally:
        took[name] = time.perf_counter() - t0
