"""A stream is complete only when the upstream said so, through the real gateway and a scripted
upstream (`tests/gateway/scripted.py`) that frames its answers exactly as asked.

- An upstream that ends a stream cleanly at the HTTP level (an exact Content-Length, or HTTP/1.0
  and its close) without a finish reason or `[DONE]` cut the answer: the client gets an error
  event in its door's shape, and the record is an upstream cut (502, `UpstreamCut`, truncated,
  counted by `gateway_truncations_total{cause="upstream"}` and the cost report's
  `upstream_cut_rate`).
- `stream_head = "at_once"`: an error or garbage first event ends the stream with an error event
  (no empty success).
(A stream the graceful shutdown's limit ends: `test_shutdown.py`.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.config import Config
from gateway.edge.app import create_app
from gateway.ledger.cost import economics
from gateway.ledger.record import Record
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store
from gateway.ledger.truncation import cause
from gateway.reports.cost import cost_rows
from tests.gateway.scripted import (
    ScriptedUpstream,
    chunk,
    held,
    scripted_upstream,
    sse,
    text_chunk,
)
from tests.harness import ListSink, config_from, serving_server, wait_for

DONE = b"data: [DONE]\n\n"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with scripted_upstream() as scripted:
        yield scripted


def gateway(
    url: str,
    *,
    at_once: bool = False,
    fallback: str | None = None,
    native: bool = False,
    **server: Any,
) -> Config:
    ups = [
        {
            "name": "a",
            "kind": "vllm",
            "base_url": url,
            "model": "fake-model",
            "responses_api": native,
        }
    ]
    if fallback is not None:
        ups.append({"name": "b", "kind": "vllm", "base_url": fallback, "model": "fake-model"})
    route: dict[str, Any] = {"upstreams": ["a"], "fallback": ["b"] if fallback else []}
    if at_once:
        route["stream_head"] = "at_once"
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0, **server},
            "upstreams": ups,
            "models": {"smol": route},
        }
    )


def post(root: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{root}/v1{path}", json={"model": "smol", **body}, timeout=20)


def data_events(text: str) -> list[Any]:
    return [
        orjson.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def assert_cut(record: Record) -> None:
    assert record.status == 502 and record.error_class == "UpstreamCut"
    assert record.truncated and record.finish_reason is None
    assert cause(record) == "upstream"


# ---- a clean close at the HTTP level, with no finish reason and no [DONE] ---------------------

FRAMINGS = ["content_length", "http10"]


@pytest.mark.parametrize("framing", FRAMINGS)
def test_chat_stream_cut_cleanly_is_an_error_not_a_complete_answer(
    upstream: ScriptedUpstream, framing: str
) -> None:
    upstream.script(sse([chunk("Hello"), chunk(" world")], framing))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        stream = openai.OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0).chat.completions
        got: list[str] = []
        with pytest.raises(openai.APIError) as raised:
            for event in stream.create(model="smol", messages=HELLO, stream=True):  # type: ignore[call-overload]
                got.append(event.choices[0].delta.content or "")
        metrics = httpx.get(f"{root}/metrics").text
    assert "".join(got) == "Hello world"  # what was sent reached the client, then the error
    assert "upstream a ended the stream before it finished" in raised.value.message
    [record] = sink.records
    assert_cut(record)
    assert record.chunks == 2 and record.completion_tokens == 2
    cut = [
        line
        for line in metrics.splitlines()
        if line.startswith("gateway_truncations_total{") and 'cause="upstream"' in line
    ]
    assert cut and float(cut[0].rsplit(" ", 1)[1]) == 1.0


def test_completions_stream_cut_cleanly(upstream: ScriptedUpstream) -> None:
    upstream.script(sse([text_chunk("Hello")], "http10"))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        resp = post(root, "/completions", {"prompt": "hi", "stream": True})
    assert resp.status_code == 200
    events = data_events(resp.text)
    assert events[0]["choices"][0]["text"] == "Hello"
    assert events[-1]["error"]["type"] == "upstream_error"
    assert_cut(sink.records[0])


@pytest.mark.parametrize("framing", FRAMINGS)
def test_messages_stream_cut_cleanly_ends_with_an_error_event(
    upstream: ScriptedUpstream, framing: str
) -> None:
    upstream.script(sse([chunk("Hello")], framing))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        resp = post(root, "/messages", {"max_tokens": 64, "messages": HELLO, "stream": True})
    kinds = [line[7:] for line in resp.text.splitlines() if line.startswith("event: ")]
    assert kinds[-1] == "error" and "message_stop" not in kinds
    error = data_events(resp.text)[-1]["error"]
    assert "upstream a ended the stream before it finished" in error["message"]
    assert_cut(sink.records[0])


def test_responses_stream_cut_cleanly_fails_the_response(upstream: ScriptedUpstream) -> None:
    upstream.script(sse([chunk("Hello")], "content_length"))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
        events = list(client.responses.create(model="smol", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["error", "response.failed"]
    assert "response.completed" not in kinds
    failed = events[-1].response  # what was said before the cut, marked unfinished
    assert failed.status == "failed" and failed.output[0].status == "incomplete"
    assert failed.output_text == "Hello"
    assert_cut(sink.records[0])


def responses_event(kind: str, **fields: Any) -> bytes:
    data = {"type": kind, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def test_native_responses_stream_cut_cleanly_fails_the_response(
    upstream: ScriptedUpstream,
) -> None:
    """Relayed as is from an upstream that speaks the Responses API: its stream is complete
    only with its last event (`response.completed`); cut before, the gateway ends it with the
    API's own `error` and `response.failed`."""
    response = {"id": "resp_up", "object": "response", "status": "in_progress", "output": []}
    upstream.script(
        sse(
            [
                responses_event("response.created", sequence_number=0, response=response),
                responses_event(
                    "response.output_text.delta",
                    sequence_number=1,
                    item_id="m",
                    output_index=0,
                    content_index=0,
                    delta="Hello",
                ),
            ],
            "http10",
        )
    )
    sink = ListSink()
    app = create_app(gateway(upstream.base_url, native=True), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
        events = list(client.responses.create(model="smol", input="hi", stream=True))
    assert upstream.requests[0][0].startswith(b"POST /v1/responses ")
    assert [e.type for e in events] == [
        "response.created",
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    assert [e.sequence_number for e in events] == [0, 1, 2, 3]
    failed = events[-1].response
    assert failed.id == "resp_up" and failed.status == "failed" and failed.model == "smol"
    assert failed.error is not None and "upstream a ended the stream" in failed.error.message
    assert_cut(sink.records[0])


def test_a_stream_the_upstream_finished_is_complete_in_every_framing(
    upstream: ScriptedUpstream,
) -> None:
    """The other side: a finish reason, or `[DONE]`, is the upstream saying it finished."""
    upstream.script(
        sse([chunk("Hi"), chunk("", finish="stop")], "content_length"),
        sse([chunk("Hi"), chunk("", finish="stop")], "http10"),
        sse([chunk("Hi"), DONE], "http10"),
        sse([chunk("Hi"), chunk("", finish="length"), DONE], "chunked"),
    )
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        replies = [
            post(root, "/chat/completions", {"messages": HELLO, "stream": True}) for _ in range(4)
        ]
    for resp in replies:
        assert resp.text.endswith("data: [DONE]\n\n")
        assert not any("error" in e for e in data_events(resp.text))
    assert [(r.status, r.error_class) for r in sink.records] == [(200, None)] * 4
    assert [r.finish_reason for r in sink.records] == ["stop", "stop", None, "length"]


def test_messages_door_ends_a_finished_stream_as_the_record_does(
    upstream: ScriptedUpstream,
) -> None:
    """[DONE] without a finish reason is the upstream saying it finished: the Messages door says
    `end_turn`, as the record says 200 (not an error the record does not know of)."""
    upstream.script(sse([chunk("Hi"), DONE], "http10"))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        resp = post(root, "/messages", {"max_tokens": 64, "messages": HELLO, "stream": True})
    kinds = [line[7:] for line in resp.text.splitlines() if line.startswith("event: ")]
    assert kinds[-2:] == ["message_delta", "message_stop"] and "error" not in kinds
    assert data_events(resp.text)[-2]["delta"]["stop_reason"] == "end_turn"
    assert (sink.records[0].status, sink.records[0].error_class) == (200, None)


def test_upstream_cut_rate_in_the_cost_report(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """Two streams, one cut: the stored rows give an upstream cut rate of one half."""
    upstream.script(
        sse([chunk("Hi"), chunk("", finish="stop"), DONE], "content_length"),
        sse([chunk("Hi")], "content_length"),
    )
    cfg = gateway(upstream.base_url)
    store = Store("sqlite:///records.db", root=tmp_path)
    queue = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.05)
    app = create_app(cfg, sinks=[queue], record=False)
    with serving_server(app) as (root, _):
        for _ in range(2):
            post(root, "/chat/completions", {"messages": HELLO, "stream": True})
        wait_for(lambda: store.count() == 2)
    usage = store.usage(0, 2**40)
    [row] = cost_rows(cfg, usage, economics(cfg, usage, {}))
    assert row.upstream_cut_rate == 0.5 and row.error_rate == 0.5
    store.close()


def test_an_error_event_mid_stream_is_recorded_as_the_upstreams(upstream: ScriptedUpstream) -> None:
    """An error the upstream reports inside a stream still open, after its first event: the
    client is told what it said, the record keeps its class and status (not those of the
    connection the gateway then closes)."""
    failure = b'data: {"error":{"message":"engine overloaded","code":503}}\n\n'
    first, kept_open = threading.Event(), threading.Event()
    upstream.script(held([chunk("Hello")], first, [failure]))
    upstream.answers[0].parts.insert(-1, kept_open)  # the error, then no end until released
    sink = ListSink()
    app = create_app(gateway(upstream.base_url), sinks=[sink], record=False)
    lines: list[str] = []
    try:
        with (
            serving_server(app) as (root, _),
            httpx.stream(
                "POST",
                f"{root}/v1/chat/completions",
                json={"model": "smol", "messages": HELLO, "stream": True},
                timeout=20,
            ) as resp,
        ):
            for line in resp.iter_lines():
                lines.append(line)
                if "Hello" in line:
                    first.set()  # the error event comes in a block of its own
            kept_open.set()
    finally:
        first.set()
        kept_open.set()
    error = data_events("\n".join(lines))[-1]["error"]
    assert (
        "upstream a: upstream reported an error mid-stream: engine overloaded" in error["message"]
    )
    [record] = sink.records
    assert (record.status, record.error_class) == (503, "UpstreamStreamError")
    assert record.finish_reason == "error" and not record.truncated


# ---- stream_head = "at_once": a bad first event ----------------------------------------------

BAD_FIRST = {
    # vLLM's own error event, then its [DONE]
    "vllm_error": [
        b'data: {"object":"error","message":"engine dead","type":"InternalServerError",'
        b'"code":500}\n\n',
        DONE,
    ],
    # OpenRouter's error object
    "error_object": [b'data: {"error":{"message":"provider failed","code":502}}\n\n', DONE],
    "not_json": [b"data: this is not json\n\n", DONE],
    "not_sse": [b"<html>bad gateway</html>\n\n"],
    "only_done": [DONE],
}


@pytest.mark.parametrize("first", list(BAD_FIRST))
def test_at_once_a_bad_first_event_is_an_error_not_an_empty_success(
    upstream: ScriptedUpstream, first: str
) -> None:
    upstream.script(sse(BAD_FIRST[first], "chunked"))
    sink = ListSink()
    app = create_app(gateway(upstream.base_url, at_once=True), sinks=[sink], record=False)
    with serving_server(app) as (root, _):
        resp = post(root, "/chat/completions", {"messages": HELLO, "stream": True})
    assert resp.status_code == 200  # the head went before the first event: as the README says
    events = data_events(resp.text)
    assert events and "error" in events[-1], resp.text
    assert events[-1]["error"]["type"] == "upstream_error"
    assert not any(e.get("choices") for e in events)
    [record] = sink.records
    assert record.status >= 500 and record.error_class is not None
    assert len(upstream.requests) == 1  # no retry: the head had gone
