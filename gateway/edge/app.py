"""The app factory and the application object that owns all state.

`create_app(config)` returns a FastAPI app whose lifespan builds the `Gateway`: the validated
config, the upstream connection pools, upstream state, the bounded prefix index, the metrics
registry, the record sinks, dispatch and the relay, and the background work (the health prober,
the housekeeping: `gateway/edge/housekeeping.py`). The app itself, with the generation endpoints
taken before Starlette's stack, is `gateway/edge/fastpath.py`'s `GatewayApp`. Nothing happens at
import time and nothing lives in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import telemetry
from gateway.config import (
    Config,
    default_config_path,
    listening_from_env,
    load_config,
    prometheus_multiproc_dir,
)
from gateway.edge import admin, api, doors
from gateway.edge.access import Access
from gateway.edge.connection import start_limits
from gateway.edge.console.api import router as console_router
from gateway.edge.fastpath import HOT_PATHS, Edge, GatewayApp, install_error_handlers
from gateway.edge.guard import AccessGuard
from gateway.edge.housekeeping import Demotions, Housekeeper, Prober
from gateway.edge.lane import LaneCredential
from gateway.edge.request import BODY
from gateway.ledger.backlog import Backlog
from gateway.ledger.cost import price_record
from gateway.ledger.metrics import Metrics
from gateway.ledger.record import Record, RecordSink
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store
from gateway.serving.dispatch import Dispatcher
from gateway.serving.engine import Engines
from gateway.serving.pool import Pool
from gateway.serving.prefix import PrefixIndex
from gateway.serving.processes import EngineProcesses, EngineView, ProcessHealth
from gateway.serving.relay import Relay
from gateway.serving.silence import Silence
from gateway.serving.wire import Wire
from gateway.trust.capture import ContentKeeper, TextSampler
from gateway.trust.gate import GateBook, SharedGateBook
from gateway.trust.schedule import GATEWAY_ID, EvalScheduler
from gateway.trust.shadow import ShadowMirror
from gateway.trust.watchdog import Watchdog, annotate

log = logging.getLogger("plumbline")


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


class Gateway:
    """Everything one gateway process holds, built in the lifespan and reachable as app.state:
    the composition root. Each part is given what it uses (dispatch, the relay, the background
    work in `gateway/edge/housekeeping.py`), never the gateway."""

    def __init__(
        self,
        config: Config,
        sinks: list[RecordSink] | None = None,
        store: Store | None = None,
        access: Access | None = None,
        processes: EngineProcesses | None = None,
    ):
        self.config = config
        # This gateway among those on one store (hostname:pid, and which gateway of the process).
        self.id = f"{GATEWAY_ID}:{secrets.token_hex(3)}"
        self.upstreams = {u.name: u for u in config.upstreams}
        s = config.server
        self.prefix = PrefixIndex(
            s.prefix_index_size, block=256, max_blocks=max(1, s.prefix_chars // 256)
        )
        self.metrics = Metrics(config, multiproc_dir=_path(prometheus_multiproc_dir()))
        # Several workers push their in-flight changes; one process lets the gauge read them.
        shared = self.metrics.multiproc_dir is not None
        self.pool = Pool(config, on_inflight=self.metrics.inflight if shared else None)
        if not shared:
            self.metrics.read_inflight(self.pool.states)
        self.store = store
        self.queue = RecordQueue.from_config(config, store) if store is not None else None
        if self.queue is not None:
            self.queue.gauges = Backlog(self.metrics.registry)
        self.demotions = Demotions(self.id, self.pool, store)
        self.watchdog = Watchdog(
            config, config.watchdog, self.metrics.registry, on_demote=self.demotions.changed
        )
        self.demotions.watchdog = self.watchdog
        content = (
            ContentKeeper(self.queue.submit_content, config.store.content_max_bytes)
            if self.queue is not None and config.store.store_content
            else None
        )
        self.sampler = TextSampler.from_config(config.watchdog, content)
        self.wire = Wire(s.connect_timeout_s)
        self.engines = Engines()
        self.processes = ProcessHealth(processes, self.set_health)
        self.shadow = ShadowMirror.from_config(
            config, self.wire, self.finish, registry=self.metrics.registry, store=store
        )
        self.gate_book = (
            SharedGateBook(store)
            if store is not None
            else GateBook(config.root / "var" / "gate" / "decisions.json")
        )
        self.sinks = _sinks(self.metrics, self.watchdog, self.queue, access, store, sinks)
        t = config.telemetry  # None when off: nothing of OpenTelemetry is imported
        self.tracing = telemetry.tracing(
            t.endpoint,
            service_name=t.service_name,
            headers=dict(t.headers),
            export_delay_s=t.export_delay_s,
            export_timeout_s=t.export_timeout_s,
            max_queue=t.max_queue,
            sample_ratio=t.sample_ratio,
        )
        self.silence = Silence(s.idle_timeout_s)
        self.dispatcher = Dispatcher(
            config, self.pool, self.wire, self.engines, self.prefix, self.gate_book.latest_for
        )
        self.relay = Relay(
            open=self.dispatcher.open,
            profile_for=config.profile_for,
            pool=self.pool,
            silence=self.silence,
            sampler=self.sampler,
            shadow=self.shadow,
            price=self.price,
            finish=self.finish,
            ttft_s=s.ttft_timeout_s,
            redact=self.dispatcher.redactor.text,
        )
        host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
        lane = access.lane if access is not None else None
        self.scheduler = EvalScheduler(
            config,
            store,
            self.gate_book,
            f"http://{host}:{s.port}/v1",
            api_key=lane.reveal() if lane is not None else "unused",
        )
        self.prober = Prober(
            config, self.wire, self.engines, self.set_health, self.processes.serving
        )
        self.housekeeper = (
            Housekeeper(config, store, self.gate_book, self.demotions, self.metrics)
            if store is not None
            else None
        )

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.silence.start()
        self.prober.start()
        self.scheduler.start()
        if self.housekeeper is not None:
            self.housekeeper.start()
        self.processes.start(self.loop)

    async def stop(self) -> None:
        self.processes.stop()
        await self.scheduler.stop()
        await self.shadow.drain()
        await self.silence.stop()
        await self.prober.stop()
        if self.housekeeper is not None:
            await self.housekeeper.stop()
        await self.wire.close()
        await self.demotions.drain()
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                await asyncio.to_thread(close)
        if self.store is not None:
            self.store.close()
        if self.tracing is not None:  # the spans not yet sent go now
            await asyncio.to_thread(self.tracing.close)

    def set_health(self, upstream: str, ok: bool) -> None:
        """An upstream's health, as the prober or the engines' supervisor found it."""
        if upstream in self.pool.states:
            self.pool.set_health(upstream, ok)
            self.metrics.set_health(upstream, ok)

    def engine_view(self, upstream: str) -> EngineView | None:
        """The supervisor's view of `upstream`'s engine process (`gateway.serving.processes`)."""
        return self.processes.view(upstream)

    def price(self, record: Record) -> None:
        price_record(record, self.config)

    def begin(self, record: Record) -> None:
        """A stream's request is on its way: sinks that keep starts (the record queue's journal)
        are told. Never raises."""
        for sink in self.sinks:
            begin = getattr(sink, "begin", None)
            if begin is not None:
                try:
                    begin(record)
                except Exception:
                    log.exception("record sink %s failed at a start", type(sink).__name__)

    def finish(self, record: Record) -> None:
        """A request has ended: price it and hand it to every sink. Never raises."""
        if record.e2e_s is None:
            record.e2e_s = time.perf_counter() - record.t0
        if record.upstream:
            state = self.pool.states.get(record.upstream)
            if state is not None:
                state.truncations += record.truncated
                state.reasoning_leaks += record.reasoning_leak
        price_record(record, self.config)
        annotate(record, self.config)
        if record.trace is not None:
            trace, record.trace = record.trace, None
            try:
                trace.end(record)
            except Exception:
                log.exception("ending the trace of %s failed", record.request_id)
        for sink in self.sinks:
            try:
                sink.submit(record)
            except Exception:
                log.exception("record sink %s failed", type(sink).__name__)


def _sinks(
    metrics: Metrics,
    watchdog: Watchdog,
    queue: RecordQueue | None,
    access: Access | None,
    store: Store | None,
    extra: list[RecordSink] | None,
) -> list[RecordSink]:
    """Where every finished record goes, in order: access first (the key id and the budget
    settlement must be on the record before the store turns it into a row), the store's
    queue, the metrics, the watchdog, then any the caller gave."""
    sinks: list[RecordSink] = [metrics, watchdog, *(extra or [])]
    if queue is not None:
        sinks.insert(0, queue)
    if access is not None:
        sinks.insert(0, access)
        if store is not None:
            access.attach(store.engine)
    return sinks


class KeepBody:
    """store_content: marks each generation request's scope so that `read_json` leaves the body
    it read there (`BODY`), for `call_of` to hand to the request's capture. Not in the app at
    all when store_content is off."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[BODY] = None
        await self.app(scope, receive, send)


def settle_heap() -> None:
    """Tune the cyclic garbage collector for a serving process, once the app is built.

    What exists at startup (config, pydantic and SQLAlchemy machinery, prometheus, the loaded
    modules) lives as long as the process: collected once, then frozen out of the collector's
    scans, which otherwise walk it on every full collection. Young collections are made rarer:
    a request allocates hundreds of objects, almost none of them in cycles. Measured with
    `bench/gateway_perf.py`: CPU per non-streamed request at 256 clients 621 → 333 µs."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def create_app(
    config: Config,
    sinks: list[RecordSink] | None = None,
    *,
    record: bool = True,
    config_path: Path | None = None,
    access: Access | None = None,
    tune_gc: bool = False,
    processes: EngineProcesses | None = None,
) -> FastAPI:
    """The gateway app. `record=False` runs without the store (tests, benchmarks of the relay).
    `config_path` is what `POST /admin/reload` re-reads. `tune_gc`: the process serves only
    this app (`plumbline serve`, the uvicorn factory), so it may tune the collector for it.
    `processes`: the supervisor of the engines it launched (`plumbline up`), read by routing
    and ``/health``."""
    access = access or Access(config.access)
    if access.lane is None:  # the key the gateway's own eval rounds present (edge/lane.py)
        access.lane = LaneCredential.from_config(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        keep = record and config.store.enabled
        store = await asyncio.to_thread(Store.from_config, config) if keep else None
        gateway = Gateway(config, sinks, store, access, processes)
        await gateway.start()
        app.state.gateway = gateway
        if tune_gc:
            settle_heap()
        try:
            yield
        finally:
            await gateway.stop()

    app = GatewayApp(
        title="Plumbline",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(api.router)
    app.include_router(doors.router)
    app.include_router(admin.router)
    app.include_router(console_router)
    app.state.access = access
    app.state.config_path = config_path
    s = config.server
    # The generation endpoints are served by the edge, behind its own access guard, before
    # Starlette's stack (see `GatewayApp`); their FastAPI routes stay registered (never reached)
    # so the OpenAPI schema documents the bodies.
    hot = {
        route.path: route.endpoint
        for route in app.router.routes
        if isinstance(route, APIRoute) and route.path in HOT_PATHS and "POST" in route.methods
    }
    limits = {"max_body_bytes": s.max_body_bytes, "max_header_bytes": s.max_header_bytes}
    edge: ASGIApp = Edge(hot)
    if record and config.store.enabled and config.store.store_content:
        edge = KeepBody(edge)
    app.front = AccessGuard(edge, access, stamp=False, **limits)
    app.hot = frozenset(hot)
    app.add_middleware(
        AccessGuard,
        access=access,
        max_body_bytes=s.max_body_bytes,
        max_header_bytes=s.max_header_bytes,
    )

    install_error_handlers(app)
    return app


def end_with_supervisor(supervisor: int) -> None:
    """This worker is sent SIGTERM (a graceful shutdown) when the process that started it dies,
    however it dies: a SIGKILLed `plumbline serve --workers` leaves no worker serving on its
    port. Linux's `prctl(PR_SET_PDEATHSIG)`; elsewhere nothing is done. A supervisor already
    gone by then is noticed too."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        return
    if os.getppid() != supervisor:  # it died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory` with several workers: the config path comes from
    PLUMBLINE_CONFIG (set by `plumbline serve`); under its supervisor (PLUMBLINE_SUPERVISOR),
    the worker ends with it."""
    supervisor = os.environ.get("PLUMBLINE_SUPERVISOR")  # set by deploy/launch.py's serve_workers
    if supervisor and supervisor.isdigit():
        end_with_supervisor(int(supervisor))
    path = default_config_path()
    config = listening_from_env(load_config(path))
    app = create_app(config, config_path=path, tune_gc=True)
    # This process serves only this app: its connection limits (docs/limits.md), with the
    # open-files limit raised to the hard limit.
    limits, line = start_limits(config.server)
    app.state.connection_limits = limits
    log.info("plumbline: %s", line)
    return app
