"""/v1/responses relayed as is to upstreams that implement it (`responses_api = true`)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson

from gateway.ledger.record import Record
from gateway.serving.responses_tap import ResponsesStreamTap
from gateway.trust.capture import Capture, ContentKeeper, StoredContent
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, running_gateway, wait_for


def native_config(url: str, native: bool = True) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [
                {
                    "name": "v",
                    "kind": "vllm",
                    "base_url": url,
                    "model": "fake-model",
                    "profile": "smollm2",
                    "responses_api": native,
                }
            ],
            "models": {"smol": {"profile": "smollm2", "upstreams": ["v"]}},
        }
    )


def test_native_upstream_gets_the_request_as_is_with_the_profile(fake: FakeHandle) -> None:
    fake.set_default(tokens=5)
    sink = ListSink()
    with running_gateway(native_config(fake.base_url), sinks=[sink]) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        reply = client.responses.create(model="smol", input="hello", max_output_tokens=3)
        wait_for(lambda: len(sink.records) == 1)
    [request] = fake.requests()
    assert request["path"] == "/v1/responses"
    assert request["body"]["input"] == "hello" and request["body"]["model"] == "fake-model"
    assert request["body"]["temperature"] == 0.2  # the profile, sent explicitly
    assert "stream_options" not in request["body"]
    assert reply.status == "incomplete" and reply.output_text.split() == ["tok0", "tok1", "tok2"]
    record = sink.records[0]
    assert record.door == "responses" and record.truncated and record.finish_reason == "length"
    assert record.completion_tokens == reply.usage.output_tokens
    assert record.prompt_tokens == reply.usage.input_tokens


def test_other_upstreams_still_get_the_chat_translation(fake: FakeHandle) -> None:
    with running_gateway(native_config(fake.base_url, native=False)) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        client.responses.create(model="smol", input="hello")
    assert fake.requests()[0]["path"] == "/v1/chat/completions"


def test_stream_tap_counts_usage_and_passes_bytes_unchanged() -> None:
    events = [
        {"type": "response.created", "response": {"status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "delta": "hm"},
        {"type": "response.output_text.delta", "delta": "Hi"},
        {"type": "response.output_text.delta", "delta": " there"},
        {
            "type": "response.completed",
            "response": {
                "object": "response",
                "status": "completed",
                "output": [],
                "usage": {
                    "input_tokens": 7,
                    "input_tokens_details": {"cached_tokens": 3},
                    "output_tokens": 4,
                    "output_tokens_details": {"reasoning_tokens": 1},
                },
            },
        },
    ]
    raw = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )
    record = Record("r", "responses", "smol", True)
    tap = ResponsesStreamTap(record)
    out = b"".join(tap.feed(raw[i : i + 17]) for i in range(0, len(raw), 17)) + tap.finish()
    assert out == raw
    assert (record.prompt_tokens, record.cached_tokens) == (7, 3)
    assert (record.completion_tokens, record.reasoning_tokens) == (4, 1)
    assert record.finish_reason == "stop" and not record.usage_estimated
    assert (
        record.ttft_s is not None and record.ttfa_s is not None and record.ttfa_s >= record.ttft_s
    )


def test_stream_tap_hands_the_answer_to_the_capture() -> None:
    """A native stream's text, reasoning and function call reach the capture as a chat
    stream's do: what store_content stores and the watchdog samples."""
    events = [
        {"type": "response.created", "response": {"status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "delta": "thinking"},
        {"type": "response.output_text.delta", "delta": "Hi"},
        {"type": "response.output_text.delta", "delta": " there"},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "name": "get_weather", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"city"'},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": ':"Oslo"}'},
        {
            "type": "response.completed",
            "response": {"object": "response", "status": "completed", "output": []},
        },
    ]
    raw = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    kept: list[StoredContent] = []
    record = Record("r", "responses", "smol", True)
    capture = Capture(record, None, keep_text=False, content=ContentKeeper(kept.append, 4096))
    tap = ResponsesStreamTap(record, capture)
    assert tap.feed(raw) + tap.finish() == raw  # the bytes still pass unchanged
    capture.finish()
    (row,) = [k.as_row() for k in kept]
    assert orjson.loads(row["response"]) == {
        "content": "Hi there",
        "reasoning": "thinking",
        "tool_calls": [{"name": "get_weather", "arguments": '{"city":"Oslo"}'}],
        "finish_reason": "stop",
    }


def test_a_harness_request_is_served_translated(fake: FakeHandle) -> None:
    """What only the door can serve (a namespace tool to restore, a hosted tool to drop) goes
    through the chat translation even to an upstream that implements the Responses API."""
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
    }
    with running_gateway(native_config(fake.base_url)) as url:
        for tools in ([namespace], [{"type": "web_search"}], [{"type": "function", "name": "f"}]):
            r = httpx.post(f"{url}/responses", json={"model": "smol", "input": "x", "tools": tools})
            assert r.status_code == 200 and r.json()["model"] == "smol"
    paths = [r["path"] for r in fake.requests()]
    assert paths == ["/v1/chat/completions", "/v1/chat/completions", "/v1/responses"]


def test_a_native_stream_names_the_route() -> None:
    """Relayed as is, but for the response's model: the route's name, not the upstream's id."""
    tap = ResponsesStreamTap(Record("req-x", "responses", "smol", True))
    created = {"type": "response.created", "response": {"model": "fake-model", "output": []}}
    delta = {"type": "response.output_text.delta", "delta": "fake-model"}
    done = {"type": "response.completed", "response": {"model": "fake-model", "output": []}}
    raw = b"".join(b"event: x\ndata: " + orjson.dumps(e) + b"\n\n" for e in (created, delta, done))
    out = tap.feed(raw) + tap.finish()
    blocks = out.split(b"\n\n")
    assert blocks[0].startswith(b"event: x\n")
    events = [orjson.loads(b.split(b"data: ", 1)[1]) for b in blocks if b]
    renamed = {"model": "smol", "output": []}
    assert events == [{**created, "response": renamed}, delta, {**done, "response": renamed}]
