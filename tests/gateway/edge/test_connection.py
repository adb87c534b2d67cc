"""The client connection bounded as a proxy bounds it (gateway/edge/connection.py): the gateway
served by uvicorn with `BoundedHttp` and uvloop, as `plumbline serve` runs it, on loopback, with
short limits; raw sockets play the hostile clients."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.config import parse_config
from gateway.config.server import ServerConfig
from gateway.edge import connection
from gateway.edge.app import create_app
from gateway.edge.connection import Limits, limits_for
from gateway.errors import ConfigError
from tests.harness import ListSink, config_from, free_port, serving_server, wait_for

SHORT = Limits(
    header_timeout_s=0.5,
    keepalive_timeout_s=0.5,
    body_timeout_s=0.5,
    send_timeout_s=0.5,
    max_header_bytes=16 * 1024,
    max_connections=64,
    ceiling=128,
)


@pytest.fixture(autouse=True)
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees its own log lines (they are throttled per kind)."""
    monkeypatch.setattr(connection, "throttle", connection.Throttle())


@contextlib.contextmanager
def gateway(limits: Limits, upstream: str, sinks: list[Any] | None = None) -> Iterator[str]:
    cfg = config_from(
        {
            "server": {"health_interval_s": 0, "retries": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": upstream, "model": "m"}],
            "models": {"smol": {"upstreams": ["a"]}},
        }
    )
    app = create_app(cfg, sinks=sinks, record=False)
    app.state.connection_limits = limits
    uv = {"http": "gateway.edge.connection:BoundedHttp", "loop": "uvloop"}
    with serving_server(app, **uv) as (root, _srv):
        yield root


def dial(root: str) -> socket.socket:
    host, port = root.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def read_all(s: socket.socket) -> bytes:
    """What the gateway sends until it closes the connection (a reset counts as closed)."""
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            got += chunk
    return got


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def health_s(root: str) -> float:
    start = time.monotonic()
    assert httpx.get(f"{root}/health", timeout=10).status_code in (200, 503)
    return time.monotonic() - start


def test_an_idle_connection_is_closed() -> None:
    with gateway(SHORT, "http://127.0.0.1:9/v1") as root:
        fresh = dial(root)
        used = dial(root)
        used.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert used.recv(65536).startswith(b"HTTP/1.1 ")
        assert read_all(fresh) == b""  # never sent a byte: closed, no answer
        assert read_all(used) == b""  # between two keep-alive requests: closed


def test_a_slow_request_head_gets_408(caplog: pytest.LogCaptureFixture) -> None:
    with gateway(SHORT, "http://127.0.0.1:9/v1") as root, caplog.at_level(logging.WARNING):
        s = dial(root)
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: ")
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nx-request-id: req-" in answer  # every answer names a request, this one too
    error = orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "request_timeout"
    assert "request head was not complete within 0.5s" in caplog.text


def test_a_request_in_pieces_within_the_limits_is_served() -> None:
    limits = Limits(**{**SHORT.__dict__, "header_timeout_s": 60})
    with gateway(limits, "http://127.0.0.1:9/v1") as root:
        s = dial(root)
        for piece in (b"GET /health HTTP/1.1\r\n", b"host: x\r\n", b"connection: close\r\n\r\n"):
            s.sendall(piece)
            time.sleep(0.1)
        assert read_all(s).startswith(b"HTTP/1.1 200 ")


def test_the_connection_limit_fits_the_open_files_limit() -> None:
    """A served connection may hold two descriptors, a refused one one; 256 stay free."""
    asked = ServerConfig(max_connections=4096)
    assert limits_for(asked, 1 << 20).max_connections == 4096
    assert limits_for(asked, 1 << 20).ceiling == 8192
    small = limits_for(asked, 1024)
    assert (small.max_connections, small.ceiling) == (256, 512)
    assert 2 * small.max_connections + (small.ceiling - small.max_connections) <= 1024 - 256


def test_the_limits_are_validated_config() -> None:
    base: dict[str, Any] = {"upstreams": [], "models": {}}
    keys = {"header_timeout_s": 5, "keepalive_timeout_s": 30, "body_timeout_s": 20}
    keys |= {"send_timeout_s": 15, "max_header_bytes": 32768, "max_connections": 100}
    server = parse_config({**base, "server": keys}).server
    limits = limits_for(server, 1 << 20)
    assert (limits.header_timeout_s, limits.send_timeout_s, limits.max_connections) == (5, 15, 100)
    for key, bad in (("send_timeout_s", 0), ("max_connections", 0), ("header_timeout_s", -1)):
        with pytest.raises(ConfigError, match=key):
            parse_config({**base, "server": {key: bad}})


def test_a_slow_request_body_gets_408(caplog: pytest.LogCaptureFixture) -> None:
    with gateway(SHORT, "http://127.0.0.1:9/v1") as root, caplog.at_level(logging.WARNING):
        s = dial(root)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
        s.sendall(head + b'\r\ncontent-length: 1000\r\n\r\n{"model": ')
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert "request body stopped for 0.5s" in caplog.text


def test_an_oversized_head_is_cut_while_it_arrives(caplog: pytest.LogCaptureFixture) -> None:
    """A 64 MiB header: the gateway closes the connection once 16 KiB pass (431 where the
    client reads it before the close), buffering none of the rest; /health answers meanwhile."""
    limits = Limits(**{**SHORT.__dict__, "header_timeout_s": 60})  # only the size cuts it
    with gateway(limits, "http://127.0.0.1:9/v1") as root, caplog.at_level(logging.WARNING):
        before = rss_mib()
        s = dial(root)
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-huge: " + b"a" * 12000)
        assert health_s(root) < 10  # while a head is part-way in, the gateway answers others
        sent, piece = 0, b"a" * 65536
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            while sent < 64 * 1024 * 1024:
                s.sendall(piece)
                sent += len(piece)
        answer = read_all(s)
        assert health_s(root) < 10
        grown = rss_mib() - before
    assert sent < 32 * 1024 * 1024  # the gateway stopped reading long before the end
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")
    assert grown < 48, f"peak RSS grew {grown:.0f} MiB"
    assert "request head passed 16384 bytes: answered 431" in caplog.text


def test_past_the_connection_limit_answers_503(caplog: pytest.LogCaptureFixture) -> None:
    limits = Limits(**{**SHORT.__dict__, "keepalive_timeout_s": 30, "max_connections": 2})
    limits = Limits(**{**limits.__dict__, "ceiling": 3})
    with gateway(limits, "http://127.0.0.1:9/v1") as root, caplog.at_level(logging.WARNING):
        held = [dial(root), dial(root)]
        refused = dial(root)
        refused.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = read_all(refused)
        held.append(dial(root))  # the third open now: past the ceiling
        flood = dial(root)
        assert read_all(flood) == b""  # closed at once, with no request read
        for s in held:
            s.close()
        wait_for(lambda: httpx.get(f"{root}/health", timeout=10).status_code != 503, 10)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head
    assert b"x-request-id: req-" in head
    assert orjson.loads(body)["error"]["code"] == "too_many_connections"
    assert "client connections open, the limit is 2: answered 503" in caplog.text
    assert "client connections open: one closed at once" in caplog.text


# -- a client that stops reading a stream ----------------------------------------------------
CHUNK = b"data: " + orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "x" * 16000}, "finish_reason": None}],
    }
)


@contextlib.contextmanager
def endless_upstream() -> Iterator[tuple[str, threading.Event]]:
    """An upstream that streams chat chunks until its connection is closed; the event is set
    when it sees the close."""
    closed = threading.Event()
    port = free_port()
    loop = asyncio.new_event_loop()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        event = CHUNK + b"\n\n"
        try:
            for _ in range(100_000):  # 1.6 GB: never reached by a reader that stops
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
        except (ConnectionError, OSError):
            closed.set()

    async def main(stop: asyncio.Event) -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", port)
        async with server:
            await stop.wait()

    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(stop),), daemon=True)
    thread.start()
    time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}/v1", closed
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


def test_a_client_that_stops_reading_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    sink = ListSink()
    with (
        endless_upstream() as (upstream, closed),
        gateway(SHORT, upstream, [sink]) as root,
        caplog.at_level(logging.WARNING),
    ):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        host, port = root.removeprefix("http://").split(":")
        s.connect((host, int(port)))
        body = orjson.dumps({"model": "smol", "stream": True, "messages": [{"role": "user"}]})
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")  # then it reads no more
        assert closed.wait(30), "the upstream connection was not closed"
        wait_for(lambda: len(sink.records) == 1, 10)
        s.close()
    (record,) = sink.records
    assert record.status == 499 and record.error_class == "SendTimeout"
    assert "unread for 0.5s: dropped" in caplog.text


# -- a streamed answer's blocks written straight to the socket ---------------------------------
def test_streams_on_one_connection_are_written_straight_and_kept_alive(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two streams, one after the other on one client connection: each one's blocks written by
    the body writer, each answer chunked and ended as uvicorn ends it, the connection kept."""
    written: list[bytes] = []
    made = connection.body_writer

    def counted(*args: Any) -> Any:
        write = made(*args)

        def counting(data: bytes) -> bool:
            took = write(data)
            if took:
                written.append(data)
            return took

        return counting

    monkeypatch.setattr(connection, "body_writer", counted)
    fake.set_default(tokens=6, pace_tps=100)  # a token a read, as a paced stream sends them
    limits = Limits(**{**SHORT.__dict__, "keepalive_timeout_s": 30})
    with gateway(limits, fake.base_url) as root:
        s = dial(root)
        body = orjson.dumps({"model": "smol", "stream": True, "messages": [{"role": "user"}]})
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        answers = []
        for _ in range(2):
            s.sendall(request)
            got = b""
            while not got.endswith(b"\r\n0\r\n\r\n"):
                chunk = s.recv(65536)
                assert chunk, "the connection was closed"
                got += chunk
            answers.append(got)
        s.close()
    for answer in answers:
        head, rest = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head
        events = b""
        while rest != b"0\r\n\r\n":
            size, rest = rest.split(b"\r\n", 1)
            events, rest = events + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
        assert events.endswith(b"data: [DONE]\n\n")
        tokens = [orjson.loads(e[6:]) for e in events.split(b"\n\n") if e[6:7] == b"{"]
        assert sum(bool(t["choices"] and t["choices"][0]["delta"].get("content")) for t in tokens)
    assert len(written) >= 2 * 4  # every token but those dispatch sent with the head
