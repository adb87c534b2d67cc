"""The app factory.

`create_app(config)` returns a FastAPI app whose lifespan builds the `Gateway`
(`gateway/edge/gateway.py`: everything one gateway process holds). The app itself, one access
guard in front and the generation endpoints taken before Starlette's stack, is
`gateway/edge/fastpath.py`'s `GatewayApp`, serving the request table (`gateway/edge/table.py`).
Nothing happens at import time and nothing lives in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from gateway import logs
from gateway.config import Config, default_config_path, listening_from_env, load_config
from gateway.edge.access import Access
from gateway.edge.connection import start_limits
from gateway.edge.fastpath import GatewayApp
from gateway.edge.gateway import Gateway
from gateway.edge.lane import LaneCredential
from gateway.edge.table import TABLE
from gateway.ledger.record import RecordSink
from gateway.ledger.store import Store
from gateway.serving.processes import EngineProcesses

__all__ = ["Gateway", "app_from_env", "create_app", "settle_heap", "hand_over_sooner"]

log = logging.getLogger("plumbline")
# How long a thread may keep the GIL from another that waits for it (CPython's default: 5 ms).
# The event loop waits for it whenever the record writer's or housekeeping's thread holds it; at
# 5 ms a request that needs the loop a few times while they work waited 10-15 ms more.
# `bench/housekeeping_latency.py --switch-ms` measures another value.
GIL_SWITCH_S = 0.001


def settle_heap() -> None:
    """Tune the cyclic garbage collector for a serving process, once the app is built.

    What exists at startup (config, pydantic and SQLAlchemy machinery, prometheus, the loaded
    modules) lives as long as the process: collected once, then frozen out of the collector's
    scans, which otherwise walk it on every full collection. Young collections are made rarer:
    a request allocates hundreds of objects and leaves none of them in a reference cycle
    (`tests/gateway/edge/test_reference_cycles.py`), so what survives to a young collection is
    what lives on (the CPU it saves per request is measured by `bench/gateway_perf.py`). A
    request that left a cycle made each young collection free them all: at 300 requests a
    second one came every 7 s and took 20-85 ms (`bench/housekeeping_latency.py` prints the
    collector's pauses)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def hand_over_sooner() -> None:
    """The GIL handed to a waiting thread after `GIL_SWITCH_S` rather than CPython's 5 ms, for a
    serving process: its event loop waits less behind the record writer and housekeeping."""
    sys.setswitchinterval(GIL_SWITCH_S)


def create_app(
    config: Config,
    sinks: list[RecordSink] | None = None,
    *,
    record: bool = True,
    config_path: Path | None = None,
    access: Access | None = None,
    tune_process: bool = False,
    processes: EngineProcesses | None = None,
) -> FastAPI:
    """The gateway app. `record=False` runs without the store (tests, benchmarks of the relay).
    `config_path` is what `POST /admin/reload` re-reads. `tune_process`: the process serves
    only this app (`plumbline serve`, the uvicorn factory), so it may tune the collector and the
    GIL's hand-over for it.
    `processes`: the supervisor of the engines it launched (`plumbline up`), read by routing
    and ``/health``."""
    logs.install()  # every log line names the request it was written for
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
        if tune_process:
            settle_heap()
            hand_over_sooner()
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
    app.state.access = access
    app.state.config_path = config_path
    s = config.server
    app.serve_table(
        TABLE,
        access,
        max_body_bytes=s.max_body_bytes,
        max_header_bytes=s.max_header_bytes,
        keep_body=record and config.store.enabled and config.store.store_content,
    )
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
    app = create_app(config, config_path=path, tune_process=True)
    # This process serves only this app: its connection limits (docs/limits.md), with the
    # open-files limit raised to the hard limit.
    limits, line = start_limits(config.server)
    app.state.connection_limits = limits
    log.info("plumbline: %s", line)
    return app
