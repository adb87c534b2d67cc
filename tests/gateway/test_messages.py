"""The Anthropic Messages door end to end: the real `anthropic` client -> gateway -> fake
upstream, plus property tests of the chat <-> Messages translation (whole and streamed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.doors import messages, protocol_messages
from gateway.doors.messages_stream import MessagesTranslator
from gateway.errors import BadRequest
from gateway.fake_upstream import FakeHandle
from tests.gateway.test_api import gateway_config
from tests.gateway.test_responses import (
    chats,
    essence,
    loose,
    near_requests,
    record_of,
    sse_events,
    stream_of,
    typed,
)
from tests.harness import ListSink, config_from, running_gateway


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=url.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=30
    )


@pytest.fixture
def gateway(fake: FakeHandle) -> Iterator[tuple[str, ListSink]]:
    sink = ListSink()
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        yield url, sink


HI = [{"role": "user", "content": "hello"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_text_answer_usage_and_record(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=5, cached_tokens=1)
    reply = claude(url).messages.create(
        model="smol",
        max_tokens=100,
        system=[{"type": "text", "text": "be brief"}],
        messages=[{"role": "user", "content": "hello there friend"}],
    )
    assert reply.type == "message" and reply.stop_reason == "end_turn"
    assert reply.content[0].type == "text"
    assert reply.content[0].text.split() == [f"tok{i}" for i in range(5)]
    assert reply.usage.output_tokens == 5
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == 5
    assert reply.usage.cache_read_input_tokens == 1
    body = fake.requests()[0]["body"]
    assert body["max_tokens"] == 100 and body["temperature"] == 0.2  # client cap, profile sampling
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert sink.records[0].door == "messages" and sink.records[0].max_tokens == 100


def test_stream_with_thinking(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=4, reasoning_field="reasoning", reasoning_tokens=3)
    with claude(url).messages.stream(
        model="smol", max_tokens=100, messages=HI, thinking={"type": "enabled", "budget_tokens": 50}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking.split() == ["thought0", "thought1", "thought2"]
    assert final.content[1].text.split() == [f"tok{i}" for i in range(4)]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 7 and final.usage.output_tokens_details.thinking_tokens == 3
    assert fake.requests()[0]["body"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert sink.records[0].door == "messages" and sink.records[0].stream


def test_tool_use_round_trip(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.script(
        {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}, {"text": "Sunny."}
    )
    c = claude(url)
    first = c.messages.create(
        model="smol", max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"}, messages=HI
    )
    use = first.content[-1]
    assert first.stop_reason == "tool_use"
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Paris"}
    second = c.messages.create(
        model="smol",
        max_tokens=50,
        tools=[WEATHER],
        messages=[
            *HI,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    )
    assert second.content[0].text == "Sunny."
    sent = [r["body"] for r in fake.requests()]
    assert sent[0]["tool_choice"] == "required"
    assert sent[0]["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert sent[1]["messages"][1]["tool_calls"][0]["id"] == use.id
    assert orjson.loads(sent[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert sent[1]["messages"][2:] == [
        {"role": "tool", "tool_call_id": use.id, "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ]


def test_streamed_tool_use(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(tool_call={"name": "get_weather", "arguments": {"city": "Oslo"}})
    with claude(url).messages.stream(
        model="smol", max_tokens=50, tools=[WEATHER], messages=HI
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[-1].type == "tool_use" and final.content[-1].input == {"city": "Oslo"}


def test_stop_reasons(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.script({"text": "one two STOP three"}, {"tokens": 30})
    c = claude(url)
    stopped = c.messages.create(model="smol", max_tokens=50, messages=HI, stop_sequences=["STOP"])
    capped = c.messages.create(model="smol", max_tokens=3, messages=HI)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "STOP")
    assert capped.stop_reason == "max_tokens"


def test_images_thinking_off_and_api_key_header(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    r = httpx.post(
        f"{url}/messages",
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        json={
            "model": "smol",
            "max_tokens": 9,
            "thinking": {"type": "disabled"},
            "messages": [
                {"role": "user", "content": [image, {"type": "text", "text": "what is it?"}]}
            ],
        },
    )
    assert r.status_code == 200 and r.json()["type"] == "message"
    body = fake.requests()[0]["body"]
    assert body["messages"][0]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_thinking_budget_reaches_each_upstream_in_its_dialect(
    fake: FakeHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """`thinking.budget_tokens` is a cap the engine must apply: vLLM with a reasoning parser
    gets `thinking_token_budget`, an API provider OpenRouter's `reasoning.max_tokens`; vLLM
    without a parser (which refuses the field) and llama.cpp get nothing, and that is logged."""
    ups = {
        "parsed": {"kind": "vllm", "profile": "qwen3-thinking"},
        "api": {"kind": "openai", "provider": {"only": ["X"]}},
        "plain": {"kind": "vllm", "profile": "smollm2"},
        "cpp": {"kind": "llamacpp", "profile": "smollm2"},
    }
    config = config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                {"name": n, "base_url": fake.base_url, "model": "fake-model", **u}
                for n, u in ups.items()
            ],
            "models": {n: {"upstreams": [n]} for n in ups},
        }
    )
    thinking = {"type": "enabled", "budget_tokens": 50}
    with running_gateway(config) as url:
        for name in ups:
            reply = claude(url).messages.create(
                model=name, max_tokens=100, messages=HI, thinking=thinking
            )
            assert reply.type == "message"
    bodies = dict(zip(ups, (r["body"] for r in fake.requests()), strict=True))
    assert bodies["parsed"]["thinking_token_budget"] == 50
    assert bodies["api"]["reasoning"] == {"max_tokens": 50}
    assert "thinking_token_budget" not in bodies["api"]
    for name in ("plain", "cpp"):
        assert "thinking_token_budget" not in bodies[name] and "reasoning" not in bodies[name]
        assert f"upstream {name} " in caplog.text and "not enforced" in caplog.text


def test_leaked_think_is_split_into_a_thinking_block(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(leak_think=True, tokens=3, reasoning_tokens=2)
    c = claude(url)
    whole = c.messages.create(model="smol", max_tokens=50, messages=HI)
    with c.messages.stream(model="smol", max_tokens=50, messages=HI) as stream:
        streamed = stream.get_final_message()
    for reply in (whole, streamed):
        assert [b.type for b in reply.content] == ["thinking", "text"]
        assert reply.content[0].thinking.split() == ["thought0", "thought1"]
        assert "think>" not in reply.content[1].text


def test_upstream_failures_are_anthropic_errors(fake: FakeHandle) -> None:
    fake.script({"status": 500}, {"tokens": 20, "disconnect_after_chunks": 3})
    with running_gateway(gateway_config(("a", fake.base_url), retries=0)) as url:
        c = claude(url)
        with pytest.raises(anthropic.InternalServerError) as before:
            c.messages.create(model="smol", max_tokens=50, messages=HI)
        with (
            pytest.raises(anthropic.APIStatusError) as during,
            c.messages.stream(model="smol", max_tokens=50, messages=HI) as stream,
        ):
            for _ in stream:
                pass
    assert before.value.status_code == 502
    assert before.value.body["error"]["type"] == "api_error"
    assert "answered 500" in before.value.body["error"]["message"]
    assert "broke the stream" in str(during.value)


@pytest.mark.parametrize(
    "body, status, kind, fragment",
    [
        (b"{nope", 400, "invalid_request_error", "not valid JSON"),
        (b"[]", 400, "invalid_request_error", "JSON object"),
        ({"model": "smol", "messages": HI}, 400, "invalid_request_error", "max_tokens"),
        (
            {"model": "smol", "max_tokens": 5, "messages": []},
            400,
            "invalid_request_error",
            "messages",
        ),
        (
            {"model": "smol", "max_tokens": 5, "messages": HI, "temperature": 1.5},
            400,
            "invalid_request_error",
            "temperature",
        ),
        (
            {"model": "smol", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
            400,
            "invalid_request_error",
            "role",
        ),
        (
            {
                "model": "smol",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            400,
            "invalid_request_error",
            "document",
        ),
        (
            {
                "model": "smol",
                "max_tokens": 5,
                "messages": HI,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            400,
            "invalid_request_error",
            "web_search_20250305",
        ),
        (
            {"model": "smol", "max_tokens": 5, "messages": HI, "mcp_servers": []},
            400,
            "invalid_request_error",
            "mcp_servers",
        ),
        (
            {"model": "smol", "max_tokens": 5, "messages": HI, "frobnicate": 1},
            400,
            "invalid_request_error",
            "frobnicate",
        ),
        (
            {
                "model": "smol",
                "max_tokens": 50,
                "messages": HI,
                "thinking": {"type": "enabled", "budget_tokens": 60},
            },
            400,
            "invalid_request_error",
            "budget_tokens",
        ),
        (
            {
                "model": "smol",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}],
            },
            400,
            "invalid_request_error",
            "'messages.0.content.0.text'",
        ),
        (
            {"model": "nope", "max_tokens": 5, "messages": HI},
            404,
            "not_found_error",
            "does not exist",
        ),
    ],
)
def test_bad_input_gets_an_anthropic_error(
    fake: FakeHandle, gateway: Any, body: Any, status: int, kind: str, fragment: str
) -> None:
    url, _ = gateway
    if isinstance(body, bytes):
        r = httpx.post(
            f"{url}/messages", content=body, headers={"content-type": "application/json"}
        )
    else:
        r = httpx.post(f"{url}/messages", json=body)
    assert r.status_code == status
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == kind
    assert fragment in r.json()["error"]["message"]
    assert fake.requests() == []


# ---------------------------------------------------------------- translation properties


@given(chats())
def test_whole_answer_round_trips(chat: dict[str, Any]) -> None:
    rendered = messages.render(chat, {"model": "smol"}, "msg_x")
    anthropic.types.Message.model_validate(rendered)
    assert essence(messages.chat_of(rendered)) == essence(chat)


def message_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild the message a client sees from the stream's events."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            message["content"].append(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = event["usage"]
    for index, raw in partial.items():
        message["content"][index]["input"] = messages.input_of(raw)
    return message


@given(chats(), st.integers(1, 200))
@settings(max_examples=60)
def test_streamed_answer_round_trips(chat: dict[str, Any], cut: int) -> None:
    translator = MessagesTranslator({"model": "smol"}, record_of(chat))
    events = sse_events(b"".join(translator.feed(block) for block in stream_of(chat, cut)))
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == list(range(len(starts)))
    rebuilt = message_of(events)
    anthropic.types.Message.model_validate(rebuilt)
    assert essence(messages.chat_of(rebuilt)) == essence(chat)


BLOCK_TYPES = [
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
]
SOURCE = typed(["base64", "url", "file"], url=loose, data=loose, media_type=loose)
INNER = st.lists(typed(BLOCK_TYPES, text=loose, source=SOURCE), max_size=2)
BLOCKS = st.lists(
    typed(
        BLOCK_TYPES,
        text=loose,
        source=SOURCE,
        id=loose,
        name=loose,
        input=loose,
        tool_use_id=loose,
        content=loose | INNER,
        thinking=loose,
    ),
    max_size=4,
)
TURNS = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=5) | BLOCKS}
    ),
    max_size=4,
)
MESSAGE_FIELDS = [
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "stop_sequences",
    "temperature",
    "top_k",
    "stream",
]


@given(near_requests({"messages": TURNS, "max_tokens": st.integers(1, 9)}, MESSAGE_FIELDS))
@settings(max_examples=300)
def test_any_body_is_translated_or_refused_with_a_400(body: dict[str, Any]) -> None:
    try:
        protocol_messages.check(body)
        chat = messages.chat_request(body)
    except BadRequest:
        return
    assert chat["messages"] is not None and orjson.dumps(chat)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2", "smollm2-llamacpp"])
def test_real_replica_answers_through_the_messages_door(local_stack: Any, model: str) -> None:
    """Protocol facts over the real local replicas, never the tiny model's wording."""
    sink = ListSink()
    question = [{"role": "user", "content": "Name one planet."}]
    with running_gateway(local_stack, sinks=[sink]) as url:
        c = anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=180
        )
        reply = c.messages.create(model=model, max_tokens=16, messages=question)
        with c.messages.stream(model=model, max_tokens=16, messages=question) as stream:
            texts = list(stream.text_stream)
            final = stream.get_final_message()
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.content[0].text
    assert 0 < reply.usage.output_tokens <= 16 and reply.usage.input_tokens > 0
    assert "".join(texts) == final.content[0].text
    assert final.stop_reason in ("end_turn", "max_tokens") and 0 < final.usage.output_tokens <= 16
    assert [r.door for r in sink.records] == ["messages", "messages"]
