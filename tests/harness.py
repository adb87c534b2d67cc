"""Running real servers for tests: the gateway in a background thread on a free port."""

from __future__ import annotations

import contextlib
import random
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from gateway.config import Config, parse_config
from gateway.edge.app import create_app
from gateway.ledger.record import Record


class ListSink:
    """A record sink that keeps every record it is given, in order."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def submit(self, record: Record) -> None:
        self.records.append(record)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> int:
    """The first of `n` consecutive free ports (a deploy's replicas take base, base + 1, ...),
    below Linux's ephemeral range: a port the kernel hands to an outgoing connection (as
    `free_port`'s are) can be taken by another test's client before the replica binds it."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 32_000 - n)
        socks = [socket.socket() for _ in range(n)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise RuntimeError(f"no {n} consecutive free ports between 20000 and 32000")


def config_from(data: dict[str, Any]) -> Config:
    """A config whose folder is a fresh temporary one: what a gateway writes beside its config
    (gate decisions, the record spool, eval runs) stays out of the checkout."""
    return parse_config(data, root=Path(tempfile.mkdtemp(prefix="plumbline-test-")))


@contextlib.contextmanager
def serving_server(
    app: Any, port: int | None = None, **server: Any
) -> Iterator[tuple[str, uvicorn.Server]]:
    """Serve an ASGI app with uvicorn on loopback (a free port unless given); yield its root
    and the server (set `should_exit` to start a graceful shutdown). `server` overrides the
    uvicorn settings."""
    port = port or free_port()
    settings: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "loop": "asyncio",
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
        **server,
    }
    srv = uvicorn.Server(uvicorn.Config(app, **settings))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", srv
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


@contextlib.contextmanager
def serving_app(app: Any, port: int | None = None, **server: Any) -> Iterator[str]:
    """Serve an ASGI app (see `serving_server`); yield its root."""
    with serving_server(app, port, **server) as (root, _srv):
        yield root


@contextlib.contextmanager
def serving(
    config: Config, sinks: list[Any] | None = None, record: bool = False, own_port: bool = False
) -> Iterator[tuple[str, Any]]:
    """Serve `create_app(config)`; yield (its /v1 URL, the app).

    The port is a free one, or `config.server.port` with `own_port` (so the gateway can call
    itself, as the eval scheduler does).
    `record=True` also runs the record store from `config.store` (give it a temporary URL)."""
    app = create_app(config, sinks=sinks, record=record)
    with serving_app(app, config.server.port if own_port else None) as root:
        yield f"{root}/v1", app


@contextlib.contextmanager
def running_gateway(
    config: Config, sinks: list[Any] | None = None, record: bool = False
) -> Iterator[str]:
    """Serve the gateway (see `serving`) and yield its /v1 URL."""
    with serving(config, sinks, record) as (url, _app):
        yield url


def wait_for(predicate: Any, timeout: float = 10.0, every: float = 0.02) -> None:
    """Poll until predicate() is true (for state that settles asynchronously), every `every`
    seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(every)


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)
