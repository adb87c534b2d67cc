"""The gateway: everything one gateway process holds, built in the app's lifespan.

The validated config, the upstream connection pools, upstream state, the bounded prefix index,
the metrics registry, the record sinks, dispatch and the relay, and the background work (the
health prober, the housekeeping: `gateway/edge/housekeeping.py`). The app that builds it is
`gateway/edge/app.py`'s; handlers reach it as `request.app.state.gateway`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path

from gateway import telemetry
from gateway.config import Config, prometheus_multiproc_dir
from gateway.edge.access import Access
from gateway.edge.housekeeping import Demotions, Housekeeper, Prober
from gateway.ledger.backlog import Backlog
from gateway.ledger.cost import price_record
from gateway.ledger.metrics import Metrics
from gateway.ledger.record import Record, RecordSink
from gateway.ledger.rejection import Rejection, RejectionWriter
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store
from gateway.ledger.upstream_state import UpstreamErrors
from gateway.serving.dispatch import Dispatcher
from gateway.serving.engine import Engines
from gateway.serving.loop_watch import LoopWatch
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
        self.loop_watch = LoopWatch(self.metrics.registry)
        # Several workers push their in-flight changes; one process lets the gauge read them.
        shared = self.metrics.multiproc_dir is not None
        self.pool = Pool(config, on_inflight=self.metrics.inflight if shared else None)
        if not shared:
            self.metrics.read_inflight(self.pool.states)
        self.store = store
        self.queue = RecordQueue.from_config(config, store) if store is not None else None
        if self.queue is not None:
            self.queue.gauges = Backlog(self.metrics.registry)
        self._trust(config, store)
        self.wire = Wire(s.connect_timeout_s)
        self.engines = Engines()
        self.processes = ProcessHealth(processes, self.set_health)
        self.shadow = ShadowMirror.from_config(
            config, self.wire, self.finish, registry=self.metrics.registry, store=store
        )
        # Requests refused before they had a record (gateway/edge/rejected.py).
        self.rejections = RejectionWriter(store.engine if store is not None else None)
        self.sinks = _sinks(self.metrics, self.watchdog, self.queue, access, store, sinks)
        # Each upstream's failed calls and state, for /health (gateway/ledger/upstream_state.py).
        self.upstream_errors = UpstreamErrors(list(self.upstreams))
        self.sinks.append(self.upstream_errors)
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
        self._serving(config)
        self._background(config, store, access)

    def _trust(self, config: Config, store: Store | None) -> None:
        """What watches the upstreams: demotions, the watchdog and its text sampler, the gate's
        book of decisions."""
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
        self.gate_book = (
            SharedGateBook(store)
            if store is not None
            else GateBook(config.root / "var" / "gate" / "decisions.json")
        )

    def _serving(self, config: Config) -> None:
        """A request's path: dispatch and the relay."""
        s = config.server
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

    def _background(self, config: Config, store: Store | None, access: Access | None) -> None:
        """The background work: scheduled eval rounds, the health prober, the housekeeping."""
        s = config.server
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
            Housekeeper(config, store, self.gate_book, self.demotions, self.metrics, holder=self.id)
            if store is not None
            else None
        )

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop_watch.start(self.loop)
        self.silence.start()
        self.prober.start()
        self.scheduler.start()
        if self.housekeeper is not None:
            self.housekeeper.start()
        self.processes.start(self.loop)

    async def stop(self) -> None:
        self.loop_watch.stop()
        self.processes.stop()
        await self.scheduler.stop()
        await self.shadow.drain()
        await self.rejections.drain()
        await self.silence.stop()
        await self.prober.stop()
        if self.housekeeper is not None:
            await self.housekeeper.stop()
        await self.wire.close()
        self.dispatcher.counter.close()
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

    def reject(self, rejection: Rejection) -> None:
        """A request refused before it had a record: counted and kept. Never raises."""
        self.metrics.reject(rejection)
        self.rejections.submit(rejection)

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
