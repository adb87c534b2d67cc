"""The Responses door end to end: the real `openai` client's `responses.create` -> gateway -> fake
upstream, plus property tests of the chat <-> Responses translation (whole and streamed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.edge.doors import response_object
from gateway.edge.doors.responses import chat_request
from gateway.edge.doors.responses_stream import ResponsesTranslator
from gateway.ledger.record import Record
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.test_api import client, gateway_config
from tests.harness import ListSink, running_gateway


@pytest.fixture
def gateway(fake: FakeHandle) -> Iterator[tuple[str, ListSink]]:
    sink = ListSink()
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        yield url, sink


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def test_text_answer_usage_profile_and_record(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=5, cached_tokens=1)
    raw = client(url).responses.with_raw_response.create(
        model="smol", input="hello there", instructions="be brief"
    )
    reply = raw.parse()
    assert reply.object == "response" and reply.status == "completed"
    assert reply.output_text.split() == [f"tok{i}" for i in range(5)]
    assert reply.usage.output_tokens == 5 and reply.usage.input_tokens == 4
    assert reply.usage.input_tokens_details.cached_tokens == 1
    assert reply.temperature == 0.2  # what was sent upstream: the smollm2 profile
    sent = fake.requests()[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    assert sent["body"]["temperature"] == 0.2 and sent["body"]["top_p"] == 0.9
    assert raw.headers["x-plumbline-request-id"] == sink.records[0].request_id
    assert sink.records[0].door == "responses" and sink.records[0].completion_tokens == 5


def test_stream_has_the_spec_events_in_order(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=4, reasoning_field="reasoning_content", reasoning_tokens=3)
    events = list(client(url).responses.create(model="smol", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.count("response.reasoning_text.delta") == 3
    assert kinds.count("response.output_text.delta") == 4
    assert (
        kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 2
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text and text.split() == [f"tok{i}" for i in range(4)]
    final = events[-1].response
    assert final.output_text == text
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text.split() == [
        "thought0",
        "thought1",
        "thought2",
    ]
    assert final.usage.output_tokens_details.reasoning_tokens == 3
    assert final.usage.output_tokens == 7
    assert sink.records[0].door == "responses" and sink.records[0].stream


def test_function_tool_round_trip(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.script(
        {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"text": "It is sunny in Paris."},
    )
    c = client(url)
    first = c.responses.create(model="smol", input="Weather in Paris?", tools=[WEATHER])
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "get_weather" and orjson.loads(call.arguments) == {"city": "Paris"}
    follow_up = [
        {"role": "user", "content": "Weather in Paris?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    second = c.responses.create(model="smol", input=follow_up, tools=[WEATHER])
    assert second.output_text == "It is sunny in Paris."
    sent = fake.requests()
    assert sent[0]["body"]["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    messages = sent[1]["body"]["messages"]
    assert messages[1]["role"] == "assistant"
    assert messages[1]["tool_calls"][0]["id"] == call.call_id
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


def test_streamed_function_call(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(tool_call={"name": "get_weather", "arguments": {"city": "Oslo"}})
    events = list(
        client(url).responses.create(
            model="smol", input="Oslo?", tools=[WEATHER], tool_choice="required", stream=True
        )
    )
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert orjson.loads(deltas) == orjson.loads(done.arguments) == {"city": "Oslo"}
    item = events[-1].response.output[-1]
    assert item.type == "function_call" and item.name == "get_weather"
    assert fake.requests()[0]["body"]["tool_choice"] == "required"


def test_options_translate_to_chat(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(tokens=20)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    raw = client(url).responses.with_raw_response.create(
        model="smol",
        input=[
            {"role": "developer", "content": "sys"},
            {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
        ],
        max_output_tokens=3,
        top_p=0.5,
        reasoning={"effort": "low"},
        store=False,
        text={"format": {"type": "json_schema", "name": "s", "schema": schema, "strict": True}},
        include=["reasoning.encrypted_content"],
        metadata={"k": "v"},
    )
    reply = raw.parse()
    # Cut at max_output_tokens: completed (Codex takes `incomplete` for an error), and said so.
    assert reply.status == "completed" and reply.incomplete_details.reason == "max_output_tokens"
    assert raw.headers["x-plumbline-truncated"] == "length"
    body = fake.requests()[0]["body"]
    assert body["max_tokens"] == 3 and body["top_p"] == 0.5 and body["reasoning_effort"] == "low"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": schema, "strict": True},
    }
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "x"},
    ]


def test_leaked_think_is_split_into_a_reasoning_item(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(leak_think=True, tokens=3, reasoning_tokens=2)
    c = client(url)
    whole = c.responses.create(model="smol", input="x")
    events = list(c.responses.create(model="smol", input="x", stream=True))
    for reply in (whole, events[-1].response):
        assert [item.type for item in reply.output] == ["reasoning", "message"]
        assert reply.output[0].content[0].text.split() == ["thought0", "thought1"]
        assert reply.output_text.split() == ["tok0", "tok1", "tok2"]
    assert all(r.reasoning_leak for r in sink.records)


def test_logprobs_are_carried(fake: FakeHandle, gateway: Any) -> None:
    url, _ = gateway
    fake.set_default(tokens=3)
    reply = client(url).responses.create(
        model="smol", input="x", top_logprobs=2, include=["message.output_text.logprobs"]
    )
    part = reply.output[0].content[0]
    assert [lp.token for lp in part.logprobs] == ["tok0", " tok1", " tok2"]
    assert len(part.logprobs[0].top_logprobs) == 2


def test_upstream_break_mid_stream_ends_with_failed(fake: FakeHandle, gateway: Any) -> None:
    url, sink = gateway
    fake.set_default(tokens=20, disconnect_after_chunks=3)
    events = list(client(url).responses.create(model="smol", input="hi", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and events[-1].response.error.message
    assert sink.records[0].status == 502


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        (
            {"model": "smol", "input": "x", "previous_response_id": "resp_1"},
            400,
            "previous_response_id",
        ),
        ({"model": "smol", "input": "x", "background": True}, 400, "background"),
        ({"model": "smol", "input": 7}, 400, "input"),
        ({"model": "smol", "input": "x", "temperature": 9}, 400, "temperature"),
        (
            {"model": "smol", "input": [{"type": "item_reference", "id": "x"}]},
            400,
            "item_reference",
        ),
        ({"model": "smol", "input": [{"type": "function_call", "name": "f"}]}, 400, "call_id"),
        ({"model": "smol", "input": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        (
            {"model": "smol", "input": "x", "tool_choice": {"type": "web_search"}},
            400,
            "tool_choice",
        ),
        (
            {"model": "smol", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            400,
            "'input.0.content.0.text' is required",
        ),
        ({"model": "nope", "input": "x"}, 404, "does not exist"),
        ({"input": "x"}, 400, "model"),
        ([1], 400, "JSON object"),
    ],
)
def test_bad_input_gets_an_openai_error(
    fake: FakeHandle, gateway: Any, body: Any, status: int, fragment: str
) -> None:
    url, _ = gateway
    r = httpx.post(f"{url}/responses", json=body)
    assert r.status_code == status
    assert fragment in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert fake.requests() == []


def test_upstream_failure_is_an_openai_error(fake: FakeHandle) -> None:
    fake.set_default(status=500)
    with (
        running_gateway(gateway_config(("a", fake.base_url), retries=0)) as url,
        pytest.raises(openai.InternalServerError) as info,
    ):
        client(url).responses.create(model="smol", input="x")
    assert info.value.status_code == 502 and "answered 500" in str(info.value)


# ---------------------------------------------------------------- translation properties

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
calls = st.lists(
    st.tuples(
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        st.dictionaries(
            st.from_regex(r"[a-z]{1,6}", fullmatch=True),
            st.integers(-(2**53), 2**53) | texts,
            max_size=3,
        ),
    ),
    max_size=3,
)


@st.composite
def chats(draw: Any) -> dict[str, Any]:
    text, reasoning, tools = draw(texts), draw(texts), draw(calls)
    prompt = draw(st.integers(0, 10**6))
    completion = draw(st.integers(0, 10**6))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tools:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(args).decode()},
            }
            for i, (name, args) in enumerate(tools)
        ]
    finish = "tool_calls" if tools else draw(st.sampled_from(["stop", "length"]))
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": draw(st.integers(0, prompt))},
            "completion_tokens_details": {"reasoning_tokens": draw(st.integers(0, completion))},
        },
    }


def essence(chat: dict[str, Any]) -> dict[str, Any]:
    choice = chat["choices"][0]
    message = choice["message"]
    return {
        "text": message.get("content") or "",
        "reasoning": message.get("reasoning_content") or "",
        "calls": [
            (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or ()
        ],
        "finish": choice["finish_reason"],
        "usage": {k: chat["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
        | {
            "cached": chat["usage"]["prompt_tokens_details"]["cached_tokens"],
            "reasoning": chat["usage"]["completion_tokens_details"]["reasoning_tokens"],
        },
    }


@given(chats())
def test_whole_answer_round_trips(chat: dict[str, Any]) -> None:
    rendered = response_object.render(chat, {"model": "smol"}, {}, "resp_x", 0)
    openai.types.responses.Response.model_validate(rendered)
    assert essence(response_object.chat_of(rendered)) == essence(chat)


def stream_of(chat: dict[str, Any], cut: int) -> list[bytes]:
    """The chat answer as the relay streams it, in blocks of `cut` bytes."""
    message = chat["choices"][0]["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    reasoning, text = message.get("reasoning_content") or "", message.get("content") or ""
    deltas += [{"reasoning_content": reasoning[i : i + 3]} for i in range(0, len(reasoning), 3)]
    deltas += [{"content": text[i : i + 3]} for i in range(0, len(text), 3)]
    for i, call in enumerate(message.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 4]}}]}
            for j in range(0, len(args), 4)
        ]
    events = [
        {"model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    events[-1]["choices"][0]["finish_reason"] = chat["choices"][0]["finish_reason"]
    events.append({"model": "m", "choices": [], "usage": chat["usage"]})
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return [data[i : i + cut] for i in range(0, len(data), cut)]


def record_of(chat: dict[str, Any]) -> Record:
    usage = chat["usage"]
    return Record(
        "req-x",
        "responses",
        "smol",
        True,
        prompt_tokens=usage["prompt_tokens"],
        cached_tokens=usage["prompt_tokens_details"]["cached_tokens"],
        completion_tokens=usage["completion_tokens"],
        reasoning_tokens=usage["completion_tokens_details"]["reasoning_tokens"],
    )


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in lines:
            data = orjson.loads(lines[b"data"])
            assert lines[b"event"].decode() == data["type"]
            out.append(data)
    return out


@given(chats(), st.integers(1, 200))
@settings(max_examples=60)
def test_streamed_answer_round_trips(chat: dict[str, Any], cut: int) -> None:
    translator = ResponsesTranslator({"model": "smol"}, {}, record_of(chat))
    events = sse_events(b"".join(translator.feed(block) for block in stream_of(chat, cut)))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert events[-1]["type"] == f"response.{final['status']}"
    openai.types.responses.Response.model_validate(final)
    assert essence(response_object.chat_of(final)) == essence(chat)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == (chat["choices"][0]["message"].get("content") or "")


# ---------------------------------------------------------------- a real harness


@pytest.mark.slow
def test_inspect_ai_runs_through_both_openai_providers(
    fake: FakeHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """inspect-ai's `openai/` provider speaks Responses, `openai-api/` chat completions."""
    import inspect_ai  # a test dependency: missing, a failure (never a skip)
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    fake.set_default(tokens=4)
    task = inspect_ai.Task(
        dataset=[Sample(input="Say tok1", target="tok1"), Sample(input="Say tok3", target="tok3")],
        solver=generate(),
        scorer=includes(),
    )
    sink = ListSink()
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        monkeypatch.setenv("PLUMBLINE_API_KEY", "unused")
        monkeypatch.setenv("PLUMBLINE_BASE_URL", url)
        results = {}
        for model in ("openai/smol", "openai-api/plumbline/smol"):
            before = len(sink.records)
            (log,) = inspect_ai.eval(
                task, model=model, model_base_url=url, log_dir=str(tmp_path), display="none"
            )
            assert log.status == "success", log.error
            results[model] = (
                log.results.scores[0].metrics["accuracy"].value,
                {r.door for r in sink.records[before:]},
            )
    assert results == {
        "openai/smol": (1.0, {"responses"}),
        "openai-api/plumbline/smol": (1.0, {"chat"}),
    }


WORDS = [
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "user",
    "assistant",
    "system",
    "developer",
    "input_text",
    "output_text",
    "input_image",
    "function",
    "auto",
    "json_schema",
    "json_object",
    "text",
    "none",
    "low",
    "tool",
    "tool_use",
    "tool_result",
    "thinking",
    "image",
    "base64",
    "url",
    "enabled",
    "disabled",
    "any",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-3, 3)
    | st.text(max_size=5)
    | st.sampled_from(WORDS),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "role",
                    "content",
                    "text",
                    "name",
                    "call_id",
                    "arguments",
                    "output",
                    "image_url",
                    "format",
                    "effort",
                    "id",
                    "input",
                    "tool_use_id",
                    "source",
                    "thinking",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=16,
)


def near_requests(required: dict[str, Any], fields: list[str]) -> Any:
    """Bodies with the door's own field names and arbitrary values: deep in the translation."""
    optional = {name: json_values for name in fields if name not in required}
    return st.fixed_dictionaries({"model": st.just("smol"), **required}, optional=optional)


def typed(types: list[str], **optional: Any) -> Any:
    """Objects with one of `types` and maybe some fields (values arbitrary unless given)."""
    return st.fixed_dictionaries({"type": st.sampled_from(types)}, optional=optional)


loose = st.text(max_size=8) | st.text(max_size=3) | json_values
PARTS = st.lists(
    typed(
        ["input_text", "output_text", "input_image", "refusal", "input_file"],
        text=loose,
        image_url=loose,
        refusal=loose,
    ),
    max_size=3,
)
ITEMS = st.lists(
    typed(
        ["message", "function_call", "function_call_output", "reasoning", "item_reference"],
        role=st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
        content=loose | PARTS,
        call_id=loose,
        name=loose,
        arguments=loose,
        output=loose | PARTS,
        summary=PARTS,
    ),
    max_size=5,
)
RESPONSE_FIELDS = [
    "instructions",
    "tools",
    "tool_choice",
    "reasoning",
    "text",
    "include",
    "max_output_tokens",
    "temperature",
    "stream",
    "store",
    "top_logprobs",
]


@given(near_requests({"input": loose | ITEMS}, RESPONSE_FIELDS))
@settings(max_examples=300)
def test_any_body_is_translated_or_refused_with_a_400(body: dict[str, Any]) -> None:
    from gateway.edge.doors import protocol_responses
    from gateway.errors import BadRequest

    try:
        protocol_responses.check(body)
        chat = chat_request(body)
    except BadRequest:
        return
    assert chat["messages"] is not None and orjson.dumps(chat)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2", "smollm2-llamacpp"])
def test_real_replica_answers_through_the_responses_door(local_stack: Any, model: str) -> None:
    """Protocol facts over the real local replicas, never the tiny model's wording."""
    sink = ListSink()
    with running_gateway(local_stack, sinks=[sink]) as url:
        c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=180)
        reply = c.responses.create(model=model, input="Name one planet.", max_output_tokens=16)
        events = list(
            c.responses.create(
                model=model, input="Name one planet.", max_output_tokens=16, stream=True
            )
        )
    assert reply.status in ("completed", "incomplete") and reply.output_text
    assert 0 < reply.usage.output_tokens <= 16 and reply.usage.input_tokens > 0
    final = events[-1].response
    # Translated streams end with response.<status>; vLLM's native stream (relayed as is to
    # the vLLM replica) ends with response.completed even when the status is "incomplete".
    assert events[-1].type in (f"response.{final.status}", "response.completed")
    assert final.status in ("completed", "incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and 0 < final.usage.output_tokens <= 16
    assert [r.door for r in sink.records] == ["responses", "responses"]


def test_content_parts_translate_to_chat_parts() -> None:
    """Images stay parts of a user turn (with their detail); other turns and tool outputs are
    their text parts joined; an image outside a user turn, or a part of a kind chat cannot
    carry, is dropped and marked (never a 400: harnesses add part types)."""
    from gateway.edge.doors.responses import translate

    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "what is it?"}, image]},
            {
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "a dot"},
                    {"type": "output_text", "text": "."},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "4"}],
            },
        ],
    }
    user, assistant, tool = chat_request(body)["messages"]
    assert user["content"] == [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": image["image_url"], "detail": "low"}},
    ]
    # The call joins the assistant turn before it, as chat completions carry it.
    assert assistant["content"] == "a dot\n." and assistant["tool_calls"][0]["id"] == "c1"
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "4"}
    for turn, mark in (
        ({"role": "system", "content": [image]}, "content[type=input_image] outside a user turn"),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "f"}]},
            "content[type=input_file]",
        ),
        ({"role": "user", "content": [{"type": "input_hologram"}]}, "content[type=*]"),
    ):
        translation = translate({"model": "m", "input": [turn, {"role": "user", "content": "x"}]})
        assert translation.dropped == [mark]
        assert translation.chat["messages"][-1] == {"role": "user", "content": "x"}
