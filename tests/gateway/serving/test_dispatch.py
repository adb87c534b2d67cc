"""Dispatch's waits and bounds, through the real gateway and the fake upstream: the waits between
attempts (Retry-After in seconds or as an HTTP date, capped; exponential backoff; none before a
fallback), a whole answer's first-byte timeout, and how each failed attempt is named.

Waits go through the dispatcher's injected `sleep`, which records them and returns at once: the
tests assert what the gateway chose to wait, not how long anything took."""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.edge.app import create_app
from gateway.serving.upstream import _retry_after
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, serving_server

BODY = {"model": "smol", "messages": [{"role": "user", "content": "hello there"}]}


def config(primary: str, fallback: str, **server: Any) -> Any:
    ups = [
        {"name": "a", "kind": "vllm", "base_url": primary, "model": "fake-model"},
        {"name": "b", "kind": "vllm", "base_url": fallback, "model": "fake-model"},
    ]
    return config_from(
        {
            "server": {"health_interval_s": 0, "retries": 1, "cooldown_after": 10, **server},
            "upstreams": ups,
            "models": {"smol": {"upstreams": ["a"], "fallback": ["b"]}},
        }
    )


@contextlib.contextmanager
def gateway(cfg: Any, sink: ListSink) -> Iterator[tuple[str, list[float]]]:
    """The gateway served, its waits recorded (and not slept)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    app = create_app(cfg, sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        app.state.gateway.dispatcher.sleep = sleep
        yield root, waits


def chat(root: str, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{root}/v1/chat/completions", json={**BODY, "stream": stream}, timeout=30)


def trail(sink: ListSink) -> list[tuple[str, str]]:
    [record] = sink.records
    return [(a.upstream, a.outcome) for a in record.attempts]


@pytest.mark.parametrize("stream", [False, True])
def test_retry_after_seconds_is_waited(fake: FakeHandle, fake2: FakeHandle, stream: bool) -> None:
    fake.script({"status": 429, "retry_after": 3})
    sink = ListSink()
    with gateway(config(fake.base_url, fake2.base_url), sink) as (root, waits):
        assert chat(root, stream).status_code == 200
    assert waits == [3.0]
    assert trail(sink) == [("a", "http_429"), ("a", "ok")]


def test_retry_after_http_date_is_waited(fake: FakeHandle, fake2: FakeHandle) -> None:
    fake.script(
        {"status": 503, "retry_after": email.utils.formatdate(time.time() + 600, usegmt=True)}
    )
    sink = ListSink()
    cfg = config(fake.base_url, fake2.base_url, retry_after_max_s=1000)
    with gateway(cfg, sink) as (root, waits):
        assert chat(root).status_code == 200
    [wait] = waits
    assert 300 < wait <= 600  # whole seconds in the date; starting the gateway took some
    assert trail(sink) == [("a", "http_503"), ("a", "ok")]


def test_retry_after_is_capped_by_config(fake: FakeHandle, fake2: FakeHandle) -> None:
    fake.script({"status": 429, "retry_after": 120})
    sink = ListSink()
    cfg = config(fake.base_url, fake2.base_url, retry_after_max_s=7)
    with gateway(cfg, sink) as (root, waits):
        assert chat(root).status_code == 200
    assert waits == [7.0]


def test_backoff_doubles_between_retries(fake: FakeHandle, fake2: FakeHandle) -> None:
    """No Retry-After: base × 2^(n-1) plus up to one base of jitter, for the n-th retry."""
    fake.script({"status": 503}, {"status": 502}, {"status": 500})
    sink = ListSink()
    cfg = config(fake.base_url, fake2.base_url, retries=3, retry_backoff_s=0.5)
    with gateway(cfg, sink) as (root, waits):
        assert chat(root).status_code == 200
    assert len(waits) == 3
    for n, wait in enumerate(waits, start=1):
        low = 0.5 * 2 ** (n - 1)
        assert low <= wait <= low + 0.5, (n, waits)
    assert trail(sink) == [("a", "http_503"), ("a", "http_502"), ("a", "http_500"), ("a", "ok")]
    assert fake2.requests() == []


def test_no_wait_before_a_fallback(fake: FakeHandle, fake2: FakeHandle) -> None:
    """Waits are between attempts on one upstream; the next upstream is tried at once, and the
    last retry's failure is not waited for."""
    fake.script({"status": 429, "retry_after": 4}, {"status": 429, "retry_after": 4})
    sink = ListSink()
    with gateway(config(fake.base_url, fake2.base_url), sink) as (root, waits):
        assert chat(root).status_code == 200
    assert waits == [4.0]  # between a's two attempts; none after the second, none before b
    assert trail(sink) == [("a", "http_429"), ("a", "http_429"), ("b", "ok")]


def test_retry_after_parses_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0
    assert _retry_after("2", now) == 2.0
    assert _retry_after("0.5", now) == 0.5
    assert _retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert _retry_after("Tuesday, 14-Nov-23 22:13:50 GMT", now) == 30.0  # RFC 850
    assert _retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    assert _retry_after("-3", now) == 0.0
    assert _retry_after("soon", now) is None
    assert _retry_after(None, now) is None


# ---- a whole answer's first byte ------------------------------------------------------------


def test_whole_answer_from_a_hung_replica_falls_back_after_the_first_byte_timeout(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    """No response headers within `first_byte_timeout_s`: the next upstream answers, long
    before `request_timeout_s`."""
    fake.script({"hang_before_first_byte": 60})
    sink = ListSink()
    cfg = config(fake.base_url, fake2.base_url, first_byte_timeout_s=1.5, request_timeout_s=120)
    with gateway(cfg, sink) as (root, waits):
        resp = chat(root)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-plumbline-upstream"] == "b"
    assert trail(sink) == [("a", "ttft_timeout"), ("b", "ok")]
    assert waits == []  # a first-byte timeout moves on at once


def test_whole_answer_body_is_bounded_by_the_request_timeout(fake: FakeHandle) -> None:
    """The headers came; the body did not finish within `request_timeout_s` in all."""
    sink = ListSink()
    with fake_headers_then_silence() as slow:
        cfg = config(slow, fake.base_url, first_byte_timeout_s=5, request_timeout_s=2)
        with gateway(cfg, sink) as (root, _):
            resp = chat(root)
    assert resp.status_code == 200 and resp.headers["x-plumbline-upstream"] == "b"
    assert trail(sink) == [("a", "timeout"), ("b", "ok")]


@contextlib.contextmanager
def fake_headers_then_silence() -> Iterator[str]:
    """A server that sends a whole answer's headers and part of its body, then nothing."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    conns: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conns.append(conn)
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b'content-length: 1000\r\n\r\n{"id": "x", '
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        listener.close()
        for conn in conns:
            conn.close()


# ---- how a failed attempt is named ----------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "stream", "outcome"),
    [
        # connected, request sent, closed without a word: not a connection error
        ({"drop_connection": True}, False, "dropped"),
        ({"drop_connection": True}, True, "dropped"),
        # the stream's headers came, then the connection closed before any event
        ({"disconnect_after_chunks": 0}, True, "stream_error"),
    ],
)
def test_failures_after_connecting_are_not_connect_errors(
    fake: FakeHandle, fake2: FakeHandle, behaviour: dict[str, Any], stream: bool, outcome: str
) -> None:
    fake.script(behaviour)
    sink = ListSink()
    with gateway(config(fake.base_url, fake2.base_url, retry_backoff_s=0), sink) as (root, _):
        assert chat(root, stream).status_code == 200
    assert trail(sink) == [("a", outcome), ("a", "ok")]


def test_a_200_that_is_an_error_is_retried_then_falls_back(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    error = '{"error": {"code": 502, "message": "provider returned error"}}'
    failed = {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "error"}
    fake.script({"body": error}, {"body": orjson.dumps({"choices": [failed]}).decode()})
    sink = ListSink()
    with gateway(config(fake.base_url, fake2.base_url, retry_backoff_s=0), sink) as (root, _):
        assert chat(root).status_code == 200
    assert trail(sink) == [("a", "upstream_error"), ("a", "upstream_error"), ("b", "ok")]


# ---- a stream's first byte ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_the_record_is_complete_whether_the_deferred_work_ran_after_sending_or_not(
    fake: FakeHandle, fake2: FakeHandle, stream: bool
) -> None:
    """The params hash and the shape label are worked out once the request is written (the
    upstream does not wait for them): an answered request's record carries the upstream's hash
    (the one its header says) and a shape, and so does one refused before anything was sent
    (its prompt fits no upstream's window), with the client's parameters' hash."""
    ups = [
        {"name": n, "kind": "vllm", "base_url": u, "model": "fake-model", "context_window": 512}
        for n, u in (("a", fake.base_url), ("b", fake2.base_url))
    ]
    models = {"smol": {"upstreams": ["a"], "fallback": ["b"]}}
    cfg = config_from({"server": {"health_interval_s": 0}, "upstreams": ups, "models": models})
    sink = ListSink()
    with gateway(cfg, sink) as (root, _):
        answered = chat(root, stream)
        body = {**BODY, "stream": stream, "messages": [{"role": "user", "content": "x " * 4000}]}
        refused = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30)
    assert answered.status_code == 200 and refused.status_code == 400
    ok, no = sink.records
    assert ok.params_hash == answered.headers["x-plumbline-params-hash"]
    assert ok.shape is not None and ok.upstream == "a"
    assert no.status == 400 and no.attempts == [] and no.shape is not None
    assert no.params_hash is not None and len(no.params_hash) == 16
    assert no.params_hash != ok.params_hash  # the client's parameters, not an upstream's
    assert len(fake.requests()) == 1  # the refused one was never sent


def test_a_deferred_piece_that_fails_is_logged_and_fails_nothing_else(
    fake: FakeHandle, fake2: FakeHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """Bookkeeping that breaks (here the text sampler) is logged; the request is answered, its
    record finished with the pieces deferred after it, and the upstream's in-flight count
    returns to zero."""
    sink = ListSink()
    app = create_app(config(fake.base_url, fake2.base_url), sinks=[sink], record=False)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("sampler fault")

    with serving_server(app) as (root, _):
        gw = app.state.gateway
        gw.relay.sampler.start = broken
        for stream in (False, True):
            assert chat(root, stream).status_code == 200
        inflight = gw.pool.states["a"].inflight
    assert [r.status for r in sink.records] == [200, 200]
    assert all(r.shape is not None and r.params_hash for r in sink.records)
    assert inflight == 0
    faults = [r for r in caplog.records if "deferred" in r.getMessage()]
    assert len(faults) == 2 and all("sampler fault" in (r.exc_text or "") for r in faults)
