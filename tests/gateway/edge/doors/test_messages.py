"""The Anthropic Messages door end to end: the real `anthropic` client -> gateway -> fake
upstream, plus property tests of the chat <-> Messages translation (whole and streamed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.edge.doors import messages, messages_edits, protocol_messages
from gateway.edge.doors.messages_stream import MessagesTranslator
from gateway.edge.doors.policy import HEADER, markdown
from gateway.errors import BadRequest, UpstreamUnavailable
from gateway.serving.adapt import CLAMPED_HEADER, prompt_bounds
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.doors.test_responses import (
    chats,
    essence,
    loose,
    near_requests,
    record_of,
    sse_events,
    stream_of,
    typed,
)
from tests.gateway.edge.test_api import gateway_config
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
    # The client sees Anthropic-style ids; the upstream its own ones, mapped back on replay.
    upstream_id = sent[1]["messages"][1]["tool_calls"][0]["id"]
    assert use.id == "toolu_" + upstream_id and upstream_id.startswith("chatcmpl-tool-")
    assert orjson.loads(sent[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert sent[1]["messages"][2:] == [
        {"role": "tool", "tool_call_id": upstream_id, "content": "sunny"},
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
    gets `thinking_token_budget`, an API provider OpenRouter's `reasoning.max_tokens` beside the
    thinking switch; vLLM without a parser (which refuses the field) and llama.cpp get nothing,
    and that is logged (and named on each answer, gateway/serving/dialect.py)."""
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
    assert bodies["api"]["reasoning"] == {"enabled": True, "max_tokens": 50}
    assert "thinking_token_budget" not in bodies["api"]
    for name in ("plain", "cpp"):
        assert "thinking_token_budget" not in bodies[name] and "reasoning" not in bodies[name]
        said = f"{name} cannot be sent thinking_token_budget=50 (kind {ups[name]['kind']})"
        assert f"{said}: not enforced there" in caplog.text


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
            "no user or assistant turn",
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


# ---------------------------------------------------------------- Claude Code's requests

ROOT = Path(__file__).resolve().parents[4]
# Claude Code 2.1.328's first request as it reached a capture server (device and session ids,
# and the temporary paths in its environment text, replaced).
CAPTURED = orjson.loads((Path(__file__).parent / "claude_code_request.json").read_bytes())
CC_HEADERS = {
    "authorization": "Bearer k",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,context-management-2025-06-27,"
    "advanced-tool-use-2025-11-20,effort-2025-11-24,some-future-beta-2027-01-01",
    "x-claude-code-session-id": "00000000-0000-4000-8000-000000000001",
    "x-app": "cli",
}


HAIKU = "claude-haiku-4-5-20251001"


def routes(fake: FakeHandle) -> Any:
    """Routes of each kind the door adapts to: a small window (the profile's), a thinking model
    served with a 40960 window (the upstream's) and Claude Code's haiku id as an alias, a
    reasoning_effort model, a llama.cpp upstream (no tokenizer endpoint)."""
    ups = {
        "smol": ("vllm", "smollm2"),
        "agent": ("vllm", "qwen3-thinking"),
        "oss": ("vllm", "gpt-oss"),
        "cpp": ("llamacpp", "smollm2"),
    }
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": n,
                    "kind": k,
                    "base_url": fake.base_url,
                    "model": "fake-model",
                    "profile": p,
                    **({"context_window": 40960} if n == "agent" else {}),
                }
                for n, (k, p) in ups.items()
            ],
            "models": {
                n: {"profile": p, "upstreams": [n], "aliases": [HAIKU] if n == "agent" else []}
                for n, (_, p) in ups.items()
            },
        }
    )


@pytest.fixture
def many(fake: FakeHandle) -> Iterator[tuple[str, ListSink]]:
    sink = ListSink()
    with running_gateway(routes(fake), sinks=[sink]) as url:
        yield url.removesuffix("/v1"), sink


def post(root: str, body: dict[str, Any], path: str = "/v1/messages?beta=true") -> httpx.Response:
    return httpx.post(root + path, json=body, headers=CC_HEADERS, timeout=30)


def test_the_docs_show_the_doors_policy_table() -> None:
    readme = (ROOT / "docs" / "doors" / "responses-and-messages.md").read_text()
    start = "<!-- messages-policy:start -->\n"
    shown = readme[readme.index(start) + len(start) : readme.index("<!-- messages-policy:end -->")]
    assert shown.strip() == markdown(protocol_messages.POLICY)


def test_claude_codes_first_request_is_served(fake: FakeHandle, many: Any) -> None:
    """The captured request, streamed and not: accepted whole; the upstream gets one leading
    system message without the attribution block, no Anthropic-only fields, no deferred tool,
    a max_tokens within the window; the answer names the model asked for and, with
    `display: omitted`, carries no thinking."""
    root, sink = many
    fake.set_default(reasoning_field="reasoning_content", tokens=3)
    body = {**CAPTURED, "model": "agent"}
    streamed = post(root, body)
    whole = post(root, {**body, "stream": False})
    assert streamed.status_code == whole.status_code == 200, streamed.text
    events = sse_events(streamed.content)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert events[0]["message"]["model"] == "agent" and whole.json()["model"] == "agent"
    assert whole.headers["content-type"] == "application/json"
    assert all(e.get("content_block", {}).get("type") != "thinking" for e in events)
    assert [b["type"] for b in whole.json()["content"]] == ["text"]
    assert "context_management" not in whole.json()  # keep: "all" cleared nothing
    sent = fake.requests()[0]["body"]
    for field in ("metadata", "context_management", "output_config", "thinking", "system"):
        assert field not in sent
    assert b"cache_control" not in orjson.dumps(sent) and b"defer_loading" not in orjson.dumps(sent)
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user"]
    system = sent["messages"][0]["content"]
    assert "x-anthropic-billing-header" not in system
    assert system.startswith(CAPTURED["system"][1]["text"])
    mid_conversation = CAPTURED["messages"][1]["content"][0]["text"]
    assert system.endswith(mid_conversation)  # the system turn, merged up in order
    names = [t["function"]["name"] for t in sent["tools"]]
    assert "Bash" in names and "DeferredToolPlaceholder" not in names
    assert all("$schema" not in t["function"]["parameters"] for t in sent["tools"])
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}  # adaptive: the profile's
    assert "reasoning_effort" not in sent  # qwen3 has no effort control: dropped, marked
    # max_tokens: 32000 clamped at dispatch to the upstream's window (40960, not the profile's
    # 32768) less the prompt, and marked (gateway/serving/adapt.py).
    assert sent["max_tokens"] == 40960 - prompt_bounds(sent)[1] < 32000
    clamped = f"max_tokens=32000->{sent['max_tokens']}"
    assert streamed.headers[CLAMPED_HEADER] == clamped and sink.records[0].clamped == clamped
    assert streamed.headers[HEADER] == "output_config.effort"
    assert sink.records[0].dropped == "output_config.effort"


def test_effort_and_format_reach_a_route_that_takes_them(fake: FakeHandle, many: Any) -> None:
    root, _ = many
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    for effort, said in (("max", "high"), ("xhigh", "high"), ("low", "low")):
        r = post(
            root,
            {
                "model": "oss",
                "max_tokens": 50,
                "messages": HI,
                "output_config": {
                    "effort": effort,
                    "format": {"type": "json_schema", "schema": schema},
                },
            },
        )
        assert r.status_code == 200 and HEADER not in r.headers
        sent = fake.requests()[-1]["body"]
        assert sent["reasoning_effort"] == said
        assert sent["response_format"]["json_schema"]["schema"] == schema


def test_thinking_modes(fake: FakeHandle, many: Any) -> None:
    root, _ = many
    fake.set_default(reasoning_field="reasoning", tokens=2)
    shown = post(
        root,
        {"model": "agent", "max_tokens": 50, "messages": HI, "thinking": {"type": "adaptive"}},
    )
    assert [b["type"] for b in shown.json()["content"]] == ["thinking", "text"]
    off = post(
        root,
        {"model": "agent", "max_tokens": 50, "messages": HI, "thinking": {"type": "disabled"}},
    )
    assert off.status_code == 200
    kwargs = [r["body"]["chat_template_kwargs"] for r in fake.requests()]
    assert kwargs == [{"enable_thinking": True}, {"enable_thinking": False}]


def second_turn() -> list[dict[str, Any]]:
    """A Claude Code session after ToolSearch loaded WebFetch, and a Bash call that failed."""
    return [
        {"role": "user", "content": "fetch it"},
        {
            "role": "system",
            "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "first thought", "signature": "sig"},
                {
                    "type": "tool_use",
                    "id": "toolu_h_426173683a3132",
                    "name": "ToolSearch",
                    "input": {"query": "select:WebFetch"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_h_426173683a3132",
                    "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "second thought", "signature": "sig"},
                {
                    "type": "tool_use",
                    "id": "toolu_01AbC",
                    "name": "Bash",
                    "input": {"command": "false"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01AbC",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "exit 1"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                        },
                    ],
                }
            ],
        },
    ]


CC_TOOLS = [
    {
        "name": "Bash",
        "description": "Run a command",
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    },
    {"name": "ToolSearch", "description": "Find tools", "input_schema": {"type": "object"}},
    {
        "name": "WebFetch",
        "description": "Fetch a URL",
        "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}},
        "defer_loading": True,
    },
    {
        "name": "NotebookEdit",
        "description": "Edit",
        "input_schema": {"type": "object"},
        "defer_loading": True,
    },
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
]


def test_a_later_turn_loads_deferred_tools_and_maps_results(fake: FakeHandle, many: Any) -> None:
    root, sink = many
    r = post(
        root,
        {
            "model": "agent",
            "max_tokens": 100,
            "messages": second_turn(),
            "tools": CC_TOOLS,
            "strict_future_field": 1,
        },
    )
    assert r.status_code == 200, r.text
    sent = fake.requests()[0]["body"]
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names == ["Bash", "ToolSearch", "WebFetch"]  # referenced: loaded; the rest: not yet
    msgs = sent["messages"]
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]
    assert msgs[0]["content"] == "<system-reminder>x</system-reminder>"
    assert msgs[2]["tool_calls"][0]["id"] == "Bash:12"  # the upstream's own id, mapped back
    assert msgs[3]["tool_call_id"] == "Bash:12"
    assert msgs[3]["content"].startswith("Tool 'WebFetch' is now available. Fetch a URL")
    assert '"url"' in msgs[3]["content"]
    assert msgs[4]["tool_calls"][0]["id"] == msgs[5]["tool_call_id"] == "01AbC"
    assert msgs[5]["content"] == "Error: exit 1"
    assert msgs[6]["content"][0]["type"] == "image_url"  # the result's image, in a user turn after
    assert msgs[2]["reasoning_content"] == "first thought"  # no context edit asked: kept
    assert r.headers[HEADER] == "strict_future_field,tools[type=web_search_20250305]"
    assert sink.records[0].dropped == r.headers[HEADER]


def test_only_server_tools_leave_nothing_to_choose(fake: FakeHandle, many: Any) -> None:
    root, _ = many
    web = {"type": "web_search_20250305", "name": "web_search"}
    r = post(
        root,
        {
            "model": "smol",
            "max_tokens": 9,
            "messages": HI,
            "tools": [web],
            "tool_choice": {"type": "any"},
            "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}],
        },
    )
    assert r.status_code == 200
    assert r.headers[HEADER] == "mcp_servers,tools[type=web_search_20250305],tool_choice"
    sent = fake.requests()[0]["body"]
    assert not {"tools", "tool_choice", "mcp_servers"} & set(sent)


def test_clear_thinking_keeps_the_last_turns(fake: FakeHandle, many: Any) -> None:
    root, _ = many
    edits = {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
        ]
    }
    body = {"model": "agent", "max_tokens": 100, "messages": second_turn(), "tools": CC_TOOLS[:3]}
    whole = post(root, {**body, "context_management": edits})
    streamed = post(root, {**body, "context_management": edits, "stream": True})
    kept = post(
        root,
        {
            **body,
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        },
    )
    applied = whole.json()["context_management"]["applied_edits"]
    assert applied[0]["type"] == "clear_thinking_20251015"
    assert applied[0]["cleared_thinking_turns"] == 1 and applied[0]["cleared_input_tokens"] > 0
    delta = next(e for e in sse_events(streamed.content) if e["type"] == "message_delta")
    assert delta["context_management"]["applied_edits"] == applied
    assert "context_management" not in kept.json()
    cleared, _, unchanged = (r["body"]["messages"] for r in fake.requests())
    assert (
        "reasoning_content" not in cleared[2]
        and cleared[4]["reasoning_content"] == "second thought"
    )
    assert unchanged[2]["reasoning_content"] == "first thought"


def test_clear_tool_uses_replaces_old_results(fake: FakeHandle, many: Any) -> None:
    root, _ = many
    turns: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i, tool in enumerate(["Read", "Bash", "Read", "Bash"]):
        turns.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{i}", "name": tool, "input": {"n": i}}
                ],
            }
        )
        turns.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": f"result {i} " * 50,
                    }
                ],
            }
        )
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 100},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["Read"],
        "clear_tool_inputs": True,
    }
    r = post(
        root,
        {
            "model": "agent",
            "max_tokens": 50,
            "messages": turns,
            "context_management": {"edits": [edit]},
        },
    )
    applied = r.json()["context_management"]["applied_edits"]
    assert applied[0]["type"] == "clear_tool_uses_20250919" and applied[0]["cleared_tool_uses"] == 1
    tools = [m for m in fake.requests()[0]["body"]["messages"] if m["role"] == "tool"]
    calls = [m for m in fake.requests()[0]["body"]["messages"] if m.get("tool_calls")]
    assert tools[1]["content"] == messages_edits.CLEARED  # the one old Bash result
    assert calls[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert tools[0]["content"].startswith("result 0") and tools[3]["content"].startswith("result 3")
    below = post(
        root,
        {
            "model": "agent",
            "max_tokens": 50,
            "messages": turns,
            "context_management": {
                "edits": [{**edit, "trigger": {"type": "input_tokens", "value": 10**6}}]
            },
        },
    )
    assert "context_management" not in below.json()
    unknown = post(
        root,
        {
            "model": "agent",
            "max_tokens": 50,
            "messages": HI,
            "context_management": {"edits": [{"type": "compact_20260101"}]},
        },
    )
    assert (
        unknown.status_code == 200
        and unknown.headers[HEADER] == "context_management[compact_20260101]"
    )


def test_max_tokens_is_clamped_to_a_small_window(fake: FakeHandle, many: Any) -> None:
    root, sink = many
    r = post(root, {"model": "smol", "max_tokens": 32000, "messages": HI})
    fits = post(root, {"model": "smol", "max_tokens": 100, "messages": HI})
    sent = [q["body"]["max_tokens"] for q in fake.requests()]
    assert 8000 < sent[0] < 8192 and sent[1] == 100
    assert r.headers[CLAMPED_HEADER] == f"max_tokens=32000->{sent[0]}"
    assert CLAMPED_HEADER not in fits.headers
    assert sink.records[0].clamped == r.headers[CLAMPED_HEADER] and sink.records[1].clamped is None


def test_count_tokens_asks_the_engines_tokenizer(fake: FakeHandle, many: Any) -> None:
    """The fake's /tokenize counts a word a token over the chat messages (system included),
    so 5 is its count; the llama.cpp route has no tokenizer endpoint and gets the estimate."""
    root, _ = many
    c = anthropic.Anthropic(base_url=root, api_key="k", max_retries=0, timeout=30)
    counted = c.messages.with_raw_response.count_tokens(
        model="agent", messages=[{"role": "user", "content": "one two three"}], system="be brief"
    )
    assert counted.parse().input_tokens == 5
    assert counted.headers["x-plumbline-token-count"] == "tokenizer agent"
    raw = post(root, {"model": "cpp", "messages": HI}, "/v1/messages/count_tokens?beta=true")
    assert raw.status_code == 200 and raw.headers["x-plumbline-token-count"] == "estimate"
    estimate = len(orjson.dumps([[{"role": "user", "content": "hello"}], None])) // 4
    assert raw.json() == {"input_tokens": estimate}
    missing = post(root, {"model": "nope", "messages": HI}, "/v1/messages/count_tokens")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert fake.requests() == []  # counting generates nothing


def test_a_haiku_id_aliased_to_a_route(fake: FakeHandle, many: Any) -> None:
    """Claude Code's background tasks ask for a claude-haiku id: an alias of a route serves
    it, and the answer carries the name asked for."""
    root, sink = many
    whole = post(root, {"model": HAIKU, "max_tokens": 9, "messages": HI})
    streamed = post(root, {"model": HAIKU, "max_tokens": 9, "messages": HI, "stream": True})
    counted = post(root, {"model": HAIKU, "messages": HI}, "/v1/messages/count_tokens")
    assert whole.json()["model"] == HAIKU
    assert sse_events(streamed.content)[0]["message"]["model"] == HAIKU
    assert counted.headers["x-plumbline-token-count"] == "tokenizer agent"
    assert [r.model for r in sink.records] == ["agent", "agent"]


def test_the_guards_refusals_are_anthropic_errors(fake: FakeHandle) -> None:
    """A missing or wrong key, or a model the key may not use, on the Messages door: Anthropic's
    error shape, as for every other error there (the chat door keeps OpenAI's)."""
    from gateway.edge.access import hash_key

    plain = "pl-test-client-key-0123456789"
    config = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}],
            "models": {"smol": {"upstreams": ["a"]}, "big": {"upstreams": ["a"]}},
            "access": {"keys": [{"id": "k", "sha256": hash_key(plain), "models": ["smol"]}]},
        }
    )
    with running_gateway(config) as url:
        root = url.removesuffix("/v1")
        with pytest.raises(anthropic.AuthenticationError) as missing:
            anthropic.Anthropic(base_url=root, api_key="wrong", max_retries=0).messages.create(
                model="smol", max_tokens=5, messages=HI
            )
        c = anthropic.Anthropic(base_url=root, api_key=plain, max_retries=0)
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            c.messages.create(model="big", max_tokens=5, messages=HI)
        assert c.messages.create(model="smol", max_tokens=5, messages=HI).type == "message"
        chat = httpx.post(f"{url}/chat/completions", json={"model": "smol", "messages": HI})
    assert missing.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Invalid API key."},
    }
    assert denied.value.body["error"]["type"] == "permission_error"
    assert chat.status_code == 401 and chat.json()["error"]["type"] == "authentication_error"
    assert "code" in chat.json()["error"]  # OpenAI's envelope


def test_hello_is_answered(many: Any) -> None:
    root, _ = many
    assert httpx.head(root + "/api/hello").status_code == 200
    assert httpx.get(root + "/api/hello").status_code == 200


@pytest.mark.parametrize(
    "upstream, shown",
    [
        (
            "This model's maximum context length is 8192 tokens. However, you requested 9100 "
            "tokens (9000 in the messages, 100 in the completion).",
            "prompt is too long: 9000 tokens > 8192 maximum",
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your request has 12001 "
            "input tokens. Please reduce the length of the input messages.",
            "prompt is too long: 12001 tokens > 8192 maximum",
        ),
        (
            "The decoder prompt (length 9999) is longer than the maximum model length of 8192.",
            "prompt is too long: 9999 tokens > 8192 maximum",
        ),
        (
            "Requested tokens (5000) exceed context window of 4096",
            "prompt is too long: 5000 tokens > 4096 maximum",
        ),
    ],
)
def test_a_context_overflow_is_worded_as_claude_code_knows(
    fake: FakeHandle, gateway: Any, upstream: str, shown: str
) -> None:
    url, _ = gateway
    fake.set_default(status=400, message=upstream)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(url).messages.create(model="smol", max_tokens=5, messages=HI)
    assert e.value.status_code == 400
    assert e.value.body["error"] == {"type": "invalid_request_error", "message": shown}


def test_a_max_tokens_refusal_keeps_its_own_wording() -> None:
    said = (
        "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum "
        "context length is 8192 tokens and your request has 100 input tokens (32000 > 8192 - 100)."
    )
    assert messages.overflow(said) is None
    assert messages.error_body(BadRequest(said))["error"]["message"] == said


def test_overloaded_is_529() -> None:
    r = messages.error_response(UpstreamUnavailable("no upstream"))
    assert r.status_code == 529 and orjson.loads(r.body)["error"]["type"] == "overloaded_error"


def test_a_broken_stream_then_a_whole_retry(fake: FakeHandle, gateway: Any) -> None:
    """What Claude Code does after a stream breaks: the same request, non-streamed, gets JSON."""
    url, _ = gateway
    fake.script({"tokens": 20, "disconnect_after_chunks": 3}, {"tokens": 4})
    body = {"model": "smol", "max_tokens": 50, "messages": HI}
    broken = httpx.post(f"{url}/messages", json={**body, "stream": True})
    events = sse_events(broken.content)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "error"
    assert "message_stop" not in [e["type"] for e in events]
    retry = httpx.post(f"{url}/messages", json={**body, "stream": False})
    assert retry.headers["content-type"] == "application/json"
    assert retry.json()["type"] == "message" and retry.json()["stop_reason"] == "end_turn"


def test_a_stream_cut_short_ends_with_an_error_not_message_stop(
    fake: FakeHandle, gateway: Any
) -> None:
    """An upstream stream that ends cleanly without a finish reason (nor [DONE]) is an answer
    cut short: Claude Code must see an error (and retry), never a complete message."""
    url, _ = gateway
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": {"content": "half an"}, "finish_reason": None}],
    }
    fake.set_default(body="data: " + orjson.dumps(chunk).decode() + "\n\n")
    r = httpx.post(
        f"{url}/messages", json={"model": "smol", "max_tokens": 50, "messages": HI, "stream": True}
    )
    kinds = [e["type"] for e in sse_events(r.content)]
    assert kinds[0] == "message_start" and kinds[-1] == "error"
    assert "message_stop" not in kinds and "message_delta" not in kinds


def test_session_affinity_follows_claude_codes_session_id(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    """Claude Code's session id (in metadata.user_id) keeps a session on one replica."""
    from gateway.edge.doors.messages_request import session_of

    config = gateway_config(("a", fake.base_url), ("b", fake2.base_url))
    with running_gateway(config) as url:

        def served(session: str) -> str:
            user = orjson.dumps({"device_id": "d", "session_id": session}).decode()
            body = {"model": "smol", "max_tokens": 5, "messages": HI, "metadata": {"user_id": user}}
            r = httpx.post(f"{url}/messages", json=body)
            assert r.status_code == 200
            return r.headers["x-plumbline-upstream"]

        assert len({served("one session") for _ in range(6)}) == 1
        assert {served(f"session {i}") for i in range(16)} == {"a", "b"}
    assert "metadata" not in fake.requests()[0]["body"]
    user = '{"device_id":"d","account_uuid":"","session_id":"s-1"}'
    assert session_of({"metadata": {"user_id": user}}, "h") == "s-1"
    assert session_of({"metadata": {"user_id": "plain"}}, None) == "plain"
    assert session_of({}, "h") == "h" and session_of({}, None) is None


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
        chat = messages.chat_request(body).chat
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
