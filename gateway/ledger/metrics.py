"""Prometheus metrics, derived from the same records as the store rows.

Every series is `gateway_`-prefixed, in base units (seconds, USD, tokens), counters end in
`_total`. Labels are bounded: `model` is a configured model name or "other", `upstream` a
configured upstream or "other" ("none" before any upstream was chosen), `provider` one of the
providers named in the config plus the first `max_providers` seen, then "other"; error classes
and attempt outcomes likewise; `lane` is client | eval | shadow. Keys, users and free text never
become labels: a typo'd model name cannot mint a series.

Several uvicorn workers: prometheus-client's multiprocess mode keeps each worker's values in
files under one folder and merges them at scrape time. prometheus-client itself decides on the
mode when it is imported, from the `PROMETHEUS_MULTIPROC_DIR` environment variable, so that
variable must be set before the workers start (the folder emptied at each start). Only the config
module reads the environment in this codebase: it hands the same folder to
`Metrics(..., multiproc_dir=...)`, which checks prometheus-client is in multiprocess mode and
merges from it; `worker_exit(pid)` cleans up after a worker (the server's child-exit hook).
Without a folder the app's own `CollectorRegistry` is rendered; nothing is registered globally.
In multiprocess mode each worker bounds its own label sets, so `provider` can reach
workers x `max_providers` values at most.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

from gateway.config import Config
from gateway.config.routes import SHAPES
from gateway.ledger.cost import ModelEconomics, drifted
from gateway.ledger.labels import OTHER, Bounded, configured_providers, outcome
from gateway.ledger.multiproc import check_multiprocess
from gateway.ledger.quick_series import incrementer, observer
from gateway.ledger.record import LANES, Record
from gateway.ledger.rejection import Rejection
from gateway.ledger.series import Series
from gateway.ledger.truncation import cause as truncation_cause

log = logging.getLogger(__name__)

TOKEN_KINDS = ("prompt", "cached", "completion", "reasoning")
# `Metrics._slots`' children per (model, upstream, lane): a token counter per kind, then the
# latency histograms by attribute name.
_SLOTS = (*TOKEN_KINDS, "queue", "ttft", "ttfa", "e2e", "itl")


class Metrics(Series):
    """The gateway's Prometheus series. A `RecordSink`: `submit(record)` = `observe(record)`."""

    def __init__(
        self, config: Config, *, multiproc_dir: str | Path | None = None, max_providers: int = 20
    ) -> None:
        self.config = config
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._counts: dict[tuple[int, tuple[str, ...]], Callable[[float], None]] = {}
        # Per (model, upstream) labels: the token counters' and the latency histograms'
        # children in `_SLOTS` order, each made on first use (a series appears once observed),
        # as their quick `inc` and `observe` (`gateway/ledger/quick_series.py`).
        self._slots: dict[tuple[str, str, str], list[Any]] = {}
        self.multiproc_dir = None if multiproc_dir is None else Path(multiproc_dir)
        if self.multiproc_dir is not None:
            check_multiprocess(self.multiproc_dir)
        self.registry = CollectorRegistry(auto_describe=True)
        self.model = Bounded(config.models)
        self.upstream = Bounded(u.name for u in config.upstreams)
        self.provider = Bounded(configured_providers(config), extra=max_providers)
        self.error_class = Bounded((), extra=50)
        self.dropped_field = Bounded((), extra=50)
        self.shape = Bounded(SHAPES)
        self.lane = Bounded(LANES)
        self.attempt_outcome = Bounded(
            ("ok", "connect_error", "timeout", "ttft_timeout", "stream_error"), extra=40
        )
        self._define()

    # -- sink ------------------------------------------------------------------------------

    def submit(self, record: Record) -> None:
        try:
            self.observe(record)
        except Exception:  # a metrics bug must never fail a request
            log.exception("metrics: could not observe record %s", record.request_id)

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: prometheus_client's lookup validates and locks
        on every call (a tenth of the per-request CPU of the metrics sink). The label values
        are bounded (see `model`, `upstream`, `provider`), so the cache is too."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _count(self, metric: Any, *labels: str) -> Callable[[float], None]:
        """A counter child's quick `inc` (`quick_series.incrementer`): for amounts known to be
        above zero."""
        key = (id(metric), labels)
        inc = self._counts.get(key)
        if inc is None:
            inc = self._counts[key] = incrementer(self._child(metric, *labels))
        return inc

    def _slot(self, slots: list[Any], i: int, mu: tuple[str, str, str]) -> Any:
        """The quick `inc` or `observe` in `slots[i]` (`_SLOTS`), made now if this is its first
        observation."""
        quick = slots[i]
        if quick is None:
            if i < len(TOKEN_KINDS):
                quick = incrementer(self._child(self.tokens, *mu, TOKEN_KINDS[i]))
            else:
                quick = observer(self._child(getattr(self, _SLOTS[i]), *mu))
            slots[i] = quick
        return quick

    def reject(self, rejection: Rejection) -> None:
        """Count a refused request; door, reason and route are from bounded sets."""
        route = "none" if (asked := rejection.model) is None else self.config.resolve(asked)
        self._child(self.rejected, rejection.door, rejection.reason, route or "unknown").inc()

    def observe(self, record: Record) -> None:
        model, upstream = self.model(record.model), self.upstream(record.upstream)
        mu = (model, upstream, self.lane(record.lane))
        slots = self._slots.get(mu)
        if slots is None:  # bounded: model and upstream are bounded labels
            slots = self._slots[mu] = [None] * len(_SLOTS)
        ended = outcome(record)
        self._count(self.requests, *mu, self.provider(record.provider), ended)(1)
        self._count(self.shaped, *mu, self.shape(record.shape))(1)
        counts = (
            record.prompt_tokens,
            record.cached_tokens,
            record.completion_tokens,
            record.reasoning_tokens,
        )
        for i, n in enumerate(counts):
            if n > 0:
                quick = slots[i]
                (self._slot(slots, i, mu) if quick is None else quick)(n)
        self._observe_money(record, mu)
        cut = truncation_cause(record)
        if cut is not None:
            self._child(self.truncations, *mu, cut).inc()
        for flag, counter in (
            (record.reasoning_leak, self.leaks),
            (record.usage_estimated, self.estimated),
        ):
            if flag:
                self._child(counter, *mu).inc()
        if ended != "ok":
            self._child(
                self.errors, *mu, self.error_class(record.error_class or f"http_{record.status}")
            ).inc()
        self._observe_edits(record, mu)
        self._observe_attempts(record, model, mu[2])
        self._observe_latency(record, mu, slots)

    def _observe_money(self, record: Record, mu: tuple[str, str, str]) -> None:
        if record.cost_usd:
            self._child(self.cost, *mu).inc(record.cost_usd)
        if record.charged_cost_usd is not None:
            self._child(self.charged, *mu).inc(record.charged_cost_usd)
            if drifted(record, self.config.prices.get(record.upstream or "")):
                self._child(self.drift, *mu).inc()

    def _observe_edits(self, record: Record, mu: tuple[str, str, str]) -> None:
        """The fields the gateway dropped before the upstream, and the caps it clamped."""
        for name in record.dropped.split(",") if record.dropped else ():
            self._child(self.dropped, mu[0], record.door, self.dropped_field(name)).inc()
        for mark in record.clamped.split(",") if record.clamped else ():
            field = "max_tokens" if mark.startswith("max_tokens") else "max_completion_tokens"
            self._child(self.clamped, *mu, field).inc()

    def _observe_latency(self, record: Record, mu: tuple[str, str, str], slots: list[Any]) -> None:
        # A whole answer's first token is its last: counted as time to first token, it would
        # pass its end-to-end time off as one (a 30 s answer as a 30 s TTFT).
        streamed = record.stream
        for i, value in enumerate(
            (
                record.queue_s,
                record.ttft_s if streamed else None,
                record.ttfa_s if streamed else None,
                record.e2e_s,
                record.itl_mean_s,
            ),
            len(TOKEN_KINDS),
        ):
            if value is not None and value >= 0:
                quick = slots[i]
                (self._slot(slots, i, mu) if quick is None else quick)(value)

    def _observe_attempts(self, record: Record, model: str, lane: str) -> None:
        previous: str | None = None
        for attempt in record.attempts:
            upstream = self.upstream(attempt.upstream)
            ended = self.attempt_outcome(attempt.outcome)
            self._count(self.attempts, model, upstream, lane, ended)(1)
            if previous is not None:
                counter = self.retries if attempt.upstream == previous else self.fallbacks
                self._child(counter, model, upstream, lane).inc()
            previous = attempt.upstream

    # -- state -----------------------------------------------------------------------------

    def read_inflight(self, upstreams: Mapping[str, Any]) -> None:
        """Single process only: the in-flight gauge reads each upstream's count (an object with
        an `inflight` attribute) when scraped, so requests do not touch it. In multiprocess
        mode each worker pushes its changes instead (`inflight`)."""
        for name, state in upstreams.items():
            child = self.inflight_gauge.labels(self.upstream(name))
            child.set_function(functools.partial(getattr, state, "inflight"))

    def inflight(self, upstream: str, delta: int) -> None:
        self._child(self.inflight_gauge, self.upstream(upstream)).inc(delta)

    def set_health(self, upstream: str, ok: bool) -> None:
        self.health.labels(self.upstream(upstream)).set(1 if ok else 0)

    def set_economics(self, economics: Mapping[str, ModelEconomics]) -> None:
        """Publish per-model $/M (node and API) and their ratio (e.g. each minute)."""
        for name, econ in economics.items():
            model = self.model(name)
            if model == OTHER:
                continue
            for side, value in (("node", econ.node_usd_per_m), ("api", econ.api_usd_per_m)):
                if value is not None:
                    self.cost_per_m.labels(model, side).set(value)
            if econ.ratio is not None:
                self.ratio.labels(model).set(econ.ratio)

    # -- exposition ------------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The text exposition of every worker (multiprocess) or of this registry."""
        if self.multiproc_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=str(self.multiproc_dir))
        return generate_latest(merged), CONTENT_TYPE_LATEST

    def worker_exit(self, pid: int) -> None:
        """Drop a dead worker's live gauges (call from the server's child-exit hook)."""
        if self.multiproc_dir is not None:
            multiprocess.mark_process_dead(pid, str(self.multiproc_dir))
