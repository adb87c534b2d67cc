"""Contract tests of the Responses door with the request shapes Codex CLI 0.169 sends (see
research/harness-wire.md 1.2-1.5): through the real gateway to the fake upstream, checking the
event sequence Codex needs and what the upstream received."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.edge.doors import protocol_responses
from gateway.edge.doors.policy import markdown
from gateway.edge.doors.responses_stream import ResponsesTranslator
from gateway.ledger.record import Record
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.test_api import gateway_config
from tests.harness import ListSink, running_gateway

POLICY_PAGE = Path(__file__).resolve().parents[4] / "docs" / "doors" / "responses-and-messages.md"
EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": name,
            "description": name,
            "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        }
        for name in ("close_agent", "spawn_agent")
    ],
}
MCP = {
    "type": "namespace",
    "name": "mcp__docs__",
    "description": "An MCP server.",
    "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+"},
}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


def codex_request(**over: Any) -> dict[str, Any]:
    """The first request of a `codex exec` session (0.169, fallback model metadata)."""
    body: dict[str, Any] = {
        "model": "smol",
        "instructions": "",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<skills>none</skills>"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Run: echo plumbline-ok"}],
            },
        ],
        "tools": [
            EXEC,
            NAMESPACE,
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a2b3-session",
        "client_metadata": {
            "session_id": "0199a2b3-session",
            "turn_id": "t1",
            "x-codex-turn-metadata": '{"turn":1}',
        },
    }
    return body | over


@pytest.fixture
def gateway(fake: FakeHandle) -> Iterator[tuple[str, ListSink]]:
    sink = ListSink()
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        yield url, sink


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [
        orjson.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
    ]


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/responses", json=body, timeout=30)


def check_sequence(events: list[dict[str, Any]]) -> None:
    """What Codex requires of a stream (harness-wire.md 1.5)."""
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.incomplete" not in kinds and "response.failed" not in kinds
    added = {e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["item"]["id"] for e in events if e["type"] == "response.output_item.done"}
    assert added == done and added
    for i, e in enumerate(events):
        if e["type"].endswith(".delta"):
            opened = [
                x["item"]["id"] for x in events[:i] if x["type"] == "response.output_item.added"
            ]
            assert e["item_id"] in opened
    final = events[-1]["response"]
    assert final["id"].startswith("resp_") and final["model"] == "smol"
    usage = final["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert isinstance(usage["input_tokens_details"]["cached_tokens"], int)
    assert isinstance(usage["output_tokens_details"]["reasoning_tokens"], int)


def test_codex_first_request_is_served_and_marked(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(harness=True)
    r = post(url, codex_request(text={"verbosity": "low"}))
    events = events_of(r)
    check_sequence(events)
    assert r.headers["x-plumbline-dropped"] == "tools[type=web_search],text.verbosity"
    assert sink.records[0].dropped == "tools[type=web_search],text.verbosity"
    call = events[-1]["response"]["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "exec_command"
    assert "namespace" not in call and orjson.loads(call["arguments"]) == {
        "cmd": "echo plumbline-ok"
    }
    sent = fake.requests()[0]["body"]
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "exec_command",
        "multi_agent_v1__close_agent",
        "multi_agent_v1__spawn_agent",
    ]
    assert sent["messages"] == [
        {"role": "system", "content": "You are Codex.\n\n<skills>none</skills>"},
        {"role": "user", "content": "Run: echo plumbline-ok"},
    ]
    for name in ("client_metadata", "prompt_cache_key", "include", "reasoning", "store", "text"):
        assert name not in sent
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is True


def test_namespaced_call_comes_back_with_its_namespace(fake: FakeHandle, gateway: Any) -> None:
    """Streamed and whole: `namespace` + the bare name; the replayed call is flattened again
    with the same map, and an MCP namespace ending in `__` is joined without another."""
    url, _ = gateway
    tools = [EXEC, NAMESPACE, MCP]
    fake.set_default(
        tool_call={"name": "multi_agent_v1__close_agent", "arguments": {"target": "x"}}
    )
    streamed = events_of(post(url, codex_request(tools=tools)))
    check_sequence(streamed)
    whole = post(url, codex_request(tools=tools, stream=False)).json()
    added = next(e["item"] for e in streamed if e["type"] == "response.output_item.added")
    for item in (added, streamed[-1]["response"]["output"][-1], whole["output"][-1]):
        assert item["type"] == "function_call"
        assert (item["namespace"], item["name"]) == ("multi_agent_v1", "close_agent")
    assert "mcp__docs__search" in [
        t["function"]["name"] for t in fake.requests()[0]["body"]["tools"]
    ]
    call = whole["output"][-1]
    history = [
        *codex_request()["input"],
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "closed"},
    ]
    fake.reset()
    fake.set_default(harness=True)
    reply = post(url, codex_request(tools=tools, input=history, stream=False)).json()
    assert reply["output"][-1]["content"][0]["text"] == "All done."
    messages = fake.requests()[0]["body"]["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": "closed"}


def test_a_name_is_never_split_and_collisions_are_renamed(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    plain = {**EXEC, "name": "multi_agent_v1__close_agent"}  # a function named like a flat one
    long_ns = {**NAMESPACE, "name": "n" * 70}
    fake.set_default(tool_call={"name": "multi_agent_v1__close_agent", "arguments": {}})
    reply = post(url, codex_request(tools=[plain, NAMESPACE, long_ns], stream=False)).json()
    item = reply["output"][-1]
    assert item["name"] == "multi_agent_v1__close_agent" and "namespace" not in item
    names = [t["function"]["name"] for t in fake.requests()[0]["body"]["tools"]]
    assert len(set(names)) == len(names) == 5 and all(len(n) <= 64 for n in names)
    renamed = names[1]
    assert renamed.startswith("multi_agent_v1__close_agent_")
    fake.reset()
    fake.set_default(tool_call={"name": renamed, "arguments": {}})
    item = post(url, codex_request(tools=[plain, NAMESPACE], stream=False)).json()["output"][-1]
    assert (item["namespace"], item["name"]) == ("multi_agent_v1", "close_agent")


def test_custom_tool_round_trips_as_custom_tool_call(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    tools = [EXEC, APPLY_PATCH]
    fake.set_default(tool_call={"name": "apply_patch", "arguments": {"input": PATCH}})
    streamed = events_of(post(url, codex_request(tools=tools)))
    check_sequence(streamed)
    whole = post(url, codex_request(tools=tools, stream=False)).json()
    for item in (streamed[-1]["response"]["output"][-1], whole["output"][-1]):
        assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch"
        assert item["input"] == PATCH and item["call_id"]
    done = next(e for e in streamed if e["type"] == "response.output_item.done")
    assert done["item"]["input"] == PATCH
    offered = fake.requests()[0]["body"]["tools"][1]["function"]
    assert offered["name"] == "apply_patch" and offered["parameters"]["required"] == ["input"]
    assert "start: begin_patch hunk+" in offered["description"]
    call = whole["output"][-1]
    history = [
        *codex_request()["input"],
        call,
        {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Success."},
    ]
    fake.reset()
    post(url, codex_request(tools=tools, input=history, stream=False))
    messages = fake.requests()[0]["body"]["messages"]
    fn = messages[-2]["tool_calls"][0]["function"]
    assert fn["name"] == "apply_patch" and orjson.loads(fn["arguments"]) == {"input": PATCH}
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": "Success."}


def test_empty_tools_and_a_choice_without_tools_are_not_forwarded(
    fake: FakeHandle, gateway: Any
) -> None:
    """Codex's compaction turn: `tools: []`, `parallel_tool_calls: false`, `tool_choice: auto`."""
    url, _ = gateway
    events = events_of(post(url, codex_request(tools=[], parallel_tool_calls=False)))
    check_sequence(events)
    only_hosted = codex_request(tools=[{"type": "web_search"}], stream=False)
    assert post(url, only_hosted).status_code == 200
    for sent in fake.requests():
        assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(sent["body"])


def test_developer_turns_anywhere_merge_into_the_leading_system(
    fake: FakeHandle, gateway: Any
) -> None:
    url, _ = gateway
    body = codex_request(
        instructions="base",
        stream=False,
        input=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
            {"role": "developer", "content": "late rule"},
            {"role": "system", "content": "system rule"},
            {"role": "user", "content": "three"},
        ],
    )
    assert post(url, body).status_code == 200
    assert fake.requests()[0]["body"]["messages"] == [
        {"role": "system", "content": "base\n\nlate rule\n\nsystem rule"},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]


def test_tool_output_parts_text_joined_images_to_a_user_turn(
    fake: FakeHandle, gateway: Any
) -> None:
    url, _ = gateway
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    history = [
        {"role": "user", "content": "look"},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "an image:"}, image],
        },
        {"type": "function_call_output", "call_id": "c2", "output": "ok"},
    ]
    assert post(url, codex_request(input=history, stream=False)).status_code == 200
    messages = fake.requests()[0]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[2]["content"] == "an image:" and messages[3]["content"] == "ok"
    assert messages[4]["content"] == [
        {"type": "image_url", "image_url": {"url": image["image_url"]}}
    ]


def test_unknown_fields_items_parts_and_tools_never_400(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    body = codex_request(
        stream=False,
        future_field={"x": 1},
        service_tier="auto",
        stream_options={"include_obfuscation": False},
        context_management=[{"type": "compaction"}],
        include=["reasoning.encrypted_content", "web_search_call.action.sources"],
        truncation="auto",
        tools=[
            EXEC,
            {"type": "hologram", "name": "h"},
            {"type": "tool_search", "execution": "client"},
        ],
        input=[
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "hi"}, {"type": "input_smell"}],
            },
            {"type": "compaction", "encrypted_content": "zzz"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "tool_search_call", "call_id": "t1", "arguments": {"query": "x"}},
        ],
    )
    r = post(url, body)
    assert r.status_code == 200, r.text
    assert r.headers["x-plumbline-dropped"] == (
        "tools[type=*],tools[type=tool_search],content[type=*],input[type=*],"
        "input[type=tool_search_call],context_management"
    )
    assert fake.requests()[0]["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert sink.records[0].dropped == r.headers["x-plumbline-dropped"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
        ({"tool_choice": {"type": "web_search"}}, "does not run"),
    ],
)
def test_only_what_needs_server_state_is_refused(
    fake: FakeHandle, gateway: Any, body: dict[str, Any], fragment: str
) -> None:
    url, _ = gateway
    r = post(url, codex_request(**body))
    assert r.status_code == 400 and fragment in r.json()["error"]["message"]
    assert fake.requests() == []


def test_reasoning_comes_back_replayable(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(reasoning_field="reasoning_content", reasoning_tokens=3, tokens=2)
    events = events_of(post(url, codex_request(tools=[])))
    check_sequence(events)
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "reasoning" and item["encrypted_content"] is None
    assert item["content"][0]["text"].split() == ["thought0", "thought1", "thought2"]
    assert events[-1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == 3
    history = [*codex_request()["input"], item, {"role": "assistant", "content": "tok0 tok1"}]
    fake.reset()
    post(url, codex_request(tools=[], input=history, stream=False))
    assert (
        fake.requests()[0]["body"]["messages"][-1]["reasoning_content"]
        == item["content"][0]["text"]
    )


def test_a_max_tokens_cut_ends_completed(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=20)
    r = post(url, codex_request(tools=[], max_output_tokens=3))
    events = events_of(r)
    check_sequence(events)
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert sink.records[0].truncated


def test_reasoning_effort_translates(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    post(url, codex_request(reasoning={"effort": "medium", "summary": "auto"}, stream=False))
    assert fake.requests()[0]["body"]["reasoning_effort"] == "medium"


CONTEXT = "This model's maximum context length is 8192 tokens. However, you requested 10240 tokens."


def test_context_overflow_is_context_length_exceeded(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(status=400, message=CONTEXT)
    r = post(url, codex_request())
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length" in r.json()["error"]["message"]
    fake.set_default(status=400, message="temperature must be at most 2")
    assert post(url, codex_request()).json()["error"]["code"] == "upstream_400"


def test_context_overflow_after_the_start_is_a_failed_response() -> None:
    translator = ResponsesTranslator(
        {"model": "smol"}, {}, Record("req-x", "responses", "smol", True)
    )
    chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "a"}}]}
    error = {"error": {"message": f"upstream a: {CONTEXT}", "code": "upstream_failed"}}
    raw = translator.feed(
        b"data: " + orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps(error) + b"\n\n"
    )
    events = [orjson.loads(x[5:]) for x in raw.split(b"\n") if x.startswith(b"data:")]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "context_length_exceeded"
    assert events[-1]["response"]["id"] == translator.rid


def test_heartbeats_fill_silences_with_an_injected_clock() -> None:
    """`response.in_progress` after each `heartbeat_s` without an event, never after the end."""
    now = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    record = Record("req-x", "responses", "smol", True)
    translator = ResponsesTranslator(
        {"model": "smol"}, {}, record, heartbeat_s=10.0, clock=lambda: now[0], sleep=sleep
    )
    written: list[bytes] = []

    def write(data: bytes) -> None:
        written.append(data)
        if len(written) == 3:  # the upstream speaks, then finishes
            chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
            written.append(
                translator.feed(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
            )

    asyncio.run(asyncio.wait_for(translator.heartbeats(write), 5))
    kinds = [
        orjson.loads(line[5:])["type"]
        for block in written
        for line in block.split(b"\n")
        if line.startswith(b"data:")
    ]
    # the first heartbeat opens the stream; then in_progress each 10 s until the answer ends it
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
        "response.in_progress",
    ]
    assert kinds[-1] == "response.completed" and "response.in_progress" not in kinds[4:]
    assert slept == [10.0, 10.0, 10.0]


def test_heartbeats_reach_the_client_during_an_upstream_silence(fake: FakeHandle) -> None:
    fake.set_default(tokens=4, hang_after_chunks=2, hang=1.0)
    with running_gateway(gateway_config(("a", fake.base_url), heartbeat_s=0.1)) as url:
        events = events_of(post(url, codex_request(tools=[])))
    check_sequence(events)
    kinds = [e["type"] for e in events]
    first, last = (
        kinds.index("response.output_text.delta"),
        len(kinds) - 1 - kinds[::-1].index("response.output_text.delta"),
    )
    assert "response.in_progress" in kinds[first:last]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_prompt_cache_key_is_session_affinity(fake: FakeHandle, fake2: FakeHandle) -> None:
    sink = ListSink()
    config = gateway_config(("a", fake.base_url), ("b", fake2.base_url))
    with running_gateway(config, sinks=[sink]) as url:
        for key in ("s1", "s2", "s3", "s4"):
            for _ in range(2):
                post(url, codex_request(prompt_cache_key=key, tools=[], stream=False))
            header = httpx.post(
                f"{url}/responses",
                json=codex_request(tools=[], stream=False),
                headers={"x-session-id": key},
                timeout=30,
            )
            assert header.status_code == 200
    chosen = [r.upstream for r in sink.records]
    for i in range(0, len(chosen), 3):
        assert len(set(chosen[i : i + 3])) == 1, chosen  # the key picks what the header picks
    assert set(chosen) == {"a", "b"}  # and the keys do spread over the upstreams


def test_the_docs_table_is_the_code_table() -> None:
    text = POLICY_PAGE.read_text()
    table = markdown(protocol_responses.POLICY)
    assert table in text
    section = text[text.index("**POST /v1/responses**") :]
    assert section.index(table) < section.index("**POST /v1/messages**")
    assert not re.search(
        r"\bRefused with a 400 naming the field\b", section[: section.index(table)]
    )
