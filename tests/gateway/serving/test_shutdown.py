"""The graceful shutdown's limit (uvicorn's `timeout_graceful_shutdown`) through the real
gateway and a scripted upstream that holds its answer: a stream it ends gets an error event in
its door's shape and a 503 `GatewayShutdown` record (not a success, not a bare cut); a request
whose answer had not begun gets a 503 `gateway_shutdown` error (not uvicorn's 500) and the same
record."""

from __future__ import annotations

import threading

import httpx
import pytest

from gateway.edge.app import create_app
from tests.gateway.scripted import Answer, ScriptedUpstream, chunk, held, sse
from tests.gateway.serving.test_stream_end import (
    DONE,
    HELLO,
    data_events,
    gateway,
    post,
    upstream,
)
from tests.harness import ListSink, serving_server, wait_for

__all__ = ["upstream"]  # the fixture


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
def test_a_stream_ended_by_the_shutdown_limit_gets_an_error_and_says_so(
    upstream: ScriptedUpstream, path: str
) -> None:
    release = threading.Event()
    upstream.script(held([chunk("Hello")], release, [chunk("", finish="stop"), DONE]))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    body = {"messages": HELLO, "stream": True, "max_tokens": 16}
    text: list[str] = []
    try:
        with (
            serving_server(app, timeout_graceful_shutdown=0.5) as (root, srv),
            httpx.stream(
                "POST", f"{root}/v1{path}", json={"model": "smol", **body}, timeout=20
            ) as resp,
        ):
            lines = resp.iter_lines()
            for line in lines:  # until the first token has arrived
                text.append(line)
                if "Hello" in line:
                    break
            srv.should_exit = True  # the stream outlives the shutdown's limit
            text.extend(lines)
    finally:
        release.set()
    events = data_events("\n".join(text))
    error = events[-1]["error"]
    assert "shutting down" in error["message"]
    if path == "/messages":
        assert error["type"] == "overloaded_error"
    else:
        assert error["code"] == "gateway_shutdown"
    [record] = sink.records
    assert record.status == 503 and record.error_class == "GatewayShutdown"
    assert record.finish_reason is None and record.chunks >= 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_request_the_shutdown_limit_ends_before_its_answer_gets_a_503(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    """The upstream has not answered when the limit comes: the client gets a 503 saying the
    gateway is shutting down (not uvicorn's bare 500), its record says the same."""
    release = threading.Event()
    upstream.script(Answer([release, *sse([chunk("late", finish="stop"), DONE]).parts]))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    replies: list[httpx.Response] = []
    try:
        with serving_server(app, timeout_graceful_shutdown=0.5) as (root, srv):
            asking = threading.Thread(
                target=lambda: replies.append(
                    post(root, "/chat/completions", {"messages": HELLO, "stream": stream})
                )
            )
            asking.start()
            wait_for(lambda: len(upstream.requests) == 1)
            srv.should_exit = True
            asking.join(20)
    finally:
        release.set()
    [resp] = replies
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "gateway_shutdown"
    [record] = sink.records
    assert (record.status, record.error_class) == (503, "GatewayShutdown")
