"""The app factory and the application object that owns all state.

`create_app(config)` returns a FastAPI app whose lifespan builds the `Gateway`: the validated
config, the upstream connection pools, upstream state, the bounded prefix index, the metrics
registry, the record sinks and the health prober. Nothing happens at import time and nothing
lives in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.config import Config, default_config_path, load_config, prometheus_multiproc_dir
from gateway.edge import admin, api, doors
from gateway.edge.access import Access
from gateway.edge.console.api import router as console_router
from gateway.edge.fastpath import Edge, error_response
from gateway.edge.guard import AccessGuard
from gateway.errors import GatewayError
from gateway.ledger.cost import price_record
from gateway.ledger.metrics import Metrics
from gateway.ledger.record import Record, RecordSink
from gateway.ledger.report import window_economics
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store
from gateway.serving.dispatch import Dispatcher
from gateway.serving.engine import Engines
from gateway.serving.pool import Pool
from gateway.serving.prefix import PrefixIndex
from gateway.serving.processes import EngineProcesses, EngineView, ProcessHealth
from gateway.serving.silence import Silence
from gateway.serving.upstream import probe
from gateway.serving.wire import Wire
from gateway.trust.capture import TextSampler
from gateway.trust.gate import GateBook, SharedGateBook
from gateway.trust.schedule import GATEWAY_ID, EvalScheduler
from gateway.trust.shadow import ShadowMirror
from gateway.trust.watchdog import Watchdog, annotate

log = logging.getLogger("plumbline")
# A gateway's demotion holds for the others this long after its last refresh (each minute).
DEMOTION_TTL_S = 180.0


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


class Gateway:
    """Everything one gateway process holds. Built in the lifespan, reachable as app.state."""

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
        self.watchdog = Watchdog(
            config, config.watchdog, self.metrics.registry, on_demote=self._demoted_here
        )
        # Demotions other gateways on the store hold (upstream -> {gateway: checks}).
        self.demoted_elsewhere: dict[str, dict[str, list[str]]] = {}
        self._sharing: set[asyncio.Task[None]] = set()
        self.sampler = TextSampler.from_config(config.watchdog)
        self.wire = Wire(s.connect_timeout_s)
        self.engines = Engines()
        self.processes = ProcessHealth(processes, self._set_health)
        self.shadow = ShadowMirror.from_config(
            config, self.wire, self.finish, registry=self.metrics.registry, store=store
        )
        self.gate_book = (
            SharedGateBook(store)
            if store is not None
            else GateBook(config.root / "var" / "gate" / "decisions.json")
        )
        self.sinks: list[RecordSink] = [self.metrics, self.watchdog, *(sinks or [])]
        if self.queue is not None:
            self.sinks.insert(0, self.queue)
        if access is not None:
            # First: the key id and the budget settlement must be on the record before the
            # store turns it into a row.
            self.sinks.insert(0, access)
            if store is not None:
                access.attach(store.engine)
        self._housekeeper: asyncio.Task[None] | None = None
        self.silence = Silence(s.idle_timeout_s)
        self.dispatcher = Dispatcher(
            config, self.pool, self.wire, self.engines, self.prefix, self.gate_book.latest_for
        )
        host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
        self.scheduler = EvalScheduler(self, f"http://{host}:{s.port}/v1")
        self._prober: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.silence.start()
        if self.config.server.health_interval_s > 0:
            self._prober = asyncio.create_task(self._probe_forever())
        self.scheduler.start()
        if self.store is not None:
            self._housekeeper = asyncio.create_task(self._housekeeping())
        self.processes.start(self.loop)

    def _set_health(self, upstream: str, ok: bool) -> None:
        if upstream in self.pool.states:
            self.pool.set_health(upstream, ok)
            self.metrics.set_health(upstream, ok)

    def engine_view(self, upstream: str) -> EngineView | None:
        """The supervisor's view of `upstream`'s engine process (`gateway.serving.processes`)."""
        return self.processes.view(upstream)

    async def stop(self) -> None:
        self.processes.stop()
        await self.scheduler.stop()
        await self.shadow.drain()
        await self.silence.stop()
        for task in (self._prober, self._housekeeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.wire.close()
        if self._sharing:  # demotions on their way to the store get there before it closes
            await asyncio.gather(*self._sharing, return_exceptions=True)
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                await asyncio.to_thread(close)
        if self.store is not None:
            self.store.close()

    async def _housekeeping(self) -> None:
        """Every minute: reload the gate decisions other gateways on the store recorded, publish
        node-vs-API economics; every hour: apply retention."""
        assert self.store is not None
        store, cfg = self.store, self.config
        ticks = 0
        while True:
            if isinstance(self.gate_book, SharedGateBook):
                try:
                    await asyncio.to_thread(self.gate_book.refresh)
                except Exception:
                    log.exception("gate decisions could not be read from the store")
            await self.share_demotions()
            try:
                economics = await asyncio.to_thread(window_economics, cfg, store, 86400.0)
                self.metrics.set_economics(economics[2])
                if ticks % 60 == 0:
                    await asyncio.to_thread(
                        store.apply_retention,
                        cfg.store.retention_days,
                        cfg.store.content_retention_days,
                    )
            except Exception:
                log.exception("store housekeeping failed")
            ticks += 1
            await asyncio.sleep(60)

    def _demoted_here(self, upstream: str, demoted: bool) -> None:
        """The watchdog demoted or restored `upstream`: routing follows it (or another
        gateway's demotion), and the store hears of it now rather than at the next minute."""
        self._route_demotion(upstream)
        if self.store is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self.share_demotions())
        except RuntimeError:  # no loop here: housekeeping shares it within the minute
            return
        self._sharing.add(task)
        task.add_done_callback(self._sharing.discard)

    async def share_demotions(self, now: float | None = None) -> None:
        """Publish this gateway's demotions and take up every other gateway's: an upstream any
        gateway on the store demoted (within `DEMOTION_TTL_S`) is routed around here too."""
        if self.store is None:
            return
        now = time.time() if now is None else now
        mine = self.watchdog.demotions()
        try:
            await asyncio.to_thread(self.store.share_demotions, self.id, mine, now)
            rows = await asyncio.to_thread(self.store.demotions, now - DEMOTION_TTL_S)
        except Exception:
            log.exception("watchdog demotions could not be shared through the store")
            return
        elsewhere = {u: {g: c for g, c in by.items() if g != self.id} for u, by in rows.items()}
        self.demoted_elsewhere = {u: by for u, by in elsewhere.items() if by}
        for name in self.pool.states:
            self._route_demotion(name)

    def _route_demotion(self, upstream: str) -> None:
        """Routing demotes an upstream this gateway's watchdog or another one's demoted."""
        here = upstream in self.watchdog.demoted
        self.pool.set_demoted(upstream, here or upstream in self.demoted_elsewhere)

    async def probe_all(self) -> None:
        timeout = min(5.0, self.config.server.connect_timeout_s * 2)
        results = await asyncio.gather(
            *(probe(self.wire, u, timeout) for u in self.config.upstreams)
        )
        due = []
        serving = self.processes.serving()
        for upstream, ok in zip(self.config.upstreams, results, strict=True):
            # An engine its supervisor is restarting may answer before it is ready.
            ok = ok and serving(upstream.name)
            self.pool.set_health(upstream.name, ok)
            self.metrics.set_health(upstream.name, ok)
            if self.engines.due(upstream, ok):
                due.append(upstream)
        if due:
            await self.engines.learn(self.wire, due, timeout)

    async def _probe_forever(self) -> None:
        while True:
            try:
                await self.probe_all()
            except Exception:  # a probe must never kill the prober
                log.exception("health probe failed")
            await asyncio.sleep(self.config.server.health_interval_s)

    def price(self, record: Record) -> None:
        price_record(record, self.config)

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
        for sink in self.sinks:
            try:
                sink.submit(record)
            except Exception:
                log.exception("record sink %s failed", type(sink).__name__)


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
    app.front = AccessGuard(Edge(app.rest, routes=hot), access, **limits)
    app.hot = frozenset(hot)
    app.add_middleware(AccessGuard, access=access, **limits)

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        kind = GatewayError(str(exc.detail))
        kind.status = exc.status_code
        kind.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        if exc.status_code == 404:
            kind.message = f"Unknown path: {request.url.path}"
        elif exc.status_code == 405:
            kind.message = f"Method {request.method} is not allowed on {request.url.path}"
        return error_response(kind)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        error = GatewayError(f"Invalid request: {where}: {first.get('msg', 'invalid')}")
        error.status, error.type = 400, "invalid_request_error"
        return error_response(error)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        error = GatewayError("The gateway failed to handle this request; it has been logged.")
        return error_response(error)

    return app


class GatewayApp(FastAPI):
    """The FastAPI app, with the generation endpoints taken before Starlette's stack.

    Starlette wraps every request in its error middleware, whose `send` wrapper every streamed
    block went through, and routes it; the generation endpoints need neither (the edge renders
    their errors). `front` (the access guard around the edge) serves `POST` on `hot`; the rest
    goes through the full application, with its own access guard."""

    front: ASGIApp | None = None
    hot: frozenset[str] = frozenset()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.front is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in self.hot
        ):
            scope["app"] = self
            await self.front(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def rest(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


HOT_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
)


def app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory` with several workers: the config path comes from
    PLUMBLINE_CONFIG (set by `plumbline serve`)."""
    path = default_config_path()
    return create_app(load_config(path), config_path=path, tune_gc=True)
