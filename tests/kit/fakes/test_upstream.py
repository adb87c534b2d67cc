"""Tests for the fake upstream: wire shapes through the real openai SDK, control API, faults."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from plumbline_kit.fakes.upstream import FakeHandle, running_fake

MSGS = [{"role": "user", "content": "three little words"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeHandle]:
    with running_fake(tokens=5) as handle:
        yield handle


@pytest.fixture
def fake(server: FakeHandle) -> Iterator[FakeHandle]:
    server.reset()
    yield server


@pytest.fixture
def client(fake: FakeHandle) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as c:
        yield c


@pytest.fixture
def http(fake: FakeHandle) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake.url, timeout=10) as c:
        yield c


def sse_events(text: str) -> list[str]:
    """The data payloads of an SSE body, in order."""
    return [block[len("data: ") :] for block in text.split("\n\n") if block.startswith("data: ")]


# ------------------------------------------------------------------ shapes through the SDK


def test_chat_non_stream_shape(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="m1", messages=MSGS)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "m1"
    assert r.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 5, 8)
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_chat_stream_one_token_per_chunk_and_no_usage_unless_asked(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, stream=True))
    assert all(c.usage is None for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    tokens = [c.choices[0].delta.content for c in chunks[1:]]
    assert tokens == ["tok0", " tok1", " tok2", " tok3", " tok4"]
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_usage_only_in_final_chunk_when_asked(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
    )
    assert [c.usage is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_max_tokens_cuts_with_length(client: openai.OpenAI, fake: FakeHandle) -> None:
    r = client.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
    assert r.choices[0].message.content == "tok0 tok1"
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
    r = client.chat.completions.create(model="m", messages=MSGS, max_completion_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


def test_stop_n_and_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="m", messages=MSGS, stop=[" tok3"], n=2, logprobs=True, top_logprobs=2
    )
    assert [c.message.content for c in r.choices] == ["tok0 tok1 tok2"] * 2
    assert [c.index for c in r.choices] == [0, 1]
    lp = r.choices[0].logprobs.content
    assert [e.token for e in lp] == ["tok0", " tok1", " tok2"]
    assert len(lp[0].top_logprobs) == 2 and lp[0].top_logprobs[0].token == "tok0"
    assert r.usage.completion_tokens == 6


def test_tool_call_scripted_and_required(client: openai.OpenAI, fake: FakeHandle) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    fake.script({"tool_call": {"name": "search", "arguments": {"q": "x"}}})
    r = client.chat.completions.create(model="m", messages=MSGS, tools=tools)
    call = r.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "x"})
    assert r.choices[0].finish_reason == "tool_calls"
    stream = client.chat.completions.create(
        model="m", messages=MSGS, tools=tools, tool_choice="required", stream=True
    )
    deltas = [c.choices[0] for c in stream if c.choices]
    names = [
        tc.function.name for d in deltas for tc in d.delta.tool_calls or [] if tc.function.name
    ]
    assert names == ["lookup"] and deltas[-1].finish_reason == "tool_calls"
    plain = client.chat.completions.create(model="m", messages=MSGS, tools=tools)
    assert plain.choices[0].message.tool_calls in (None, [])


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    r = client.completions.create(model="m", prompt="a b c d", max_tokens=4, logprobs=1)
    assert r.object == "text_completion" and r.choices[0].text == "tok0 tok1 tok2 tok3"
    assert r.choices[0].finish_reason == "length" and r.usage.prompt_tokens == 4
    assert r.choices[0].logprobs.tokens == ["tok0", " tok1", " tok2", " tok3"]
    chunks = list(
        client.completions.create(
            model="m", prompt="a", stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "tok0 tok1 tok2 tok3 tok4"
    assert chunks[-1].usage.completion_tokens == 5


def test_models_embeddings_tokenize_health(client: openai.OpenAI, http: httpx.Client) -> None:
    assert [m.id for m in client.models.list()] == ["fake-model"]
    e = client.embeddings.create(model="emb", input=["one", "two words"])
    assert len(e.data) == 2 and len(e.data[0].embedding) == 8
    assert e.data[0].embedding != e.data[1].embedding and e.usage.prompt_tokens == 3
    tok = http.post("/tokenize", json={"model": "m", "messages": MSGS}).json()
    r = client.chat.completions.create(model="m", messages=MSGS)
    assert tok["count"] == len(tok["tokens"]) == r.usage.prompt_tokens
    assert http.get("/health").status_code == 200


def test_responses_non_stream(client: openai.OpenAI) -> None:
    r = client.responses.create(model="m", input="hello there", max_output_tokens=2)
    assert r.output_text == "tok0 tok1" and r.status == "incomplete"
    assert r.usage.input_tokens == 2 and r.usage.output_tokens == 2


# ------------------------------------------------------------------ behaviours


def test_reasoning_field_and_tokens(client: openai.OpenAI, fake: FakeHandle) -> None:
    fake.set_default(reasoning_field="both", reasoning_tokens=3)
    r = client.chat.completions.create(model="m", messages=MSGS)
    extra = r.choices[0].message.model_extra
    assert extra["reasoning_content"] == extra["reasoning"] == "thought0 thought1 thought2"
    assert r.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    assert r.usage.completion_tokens == 8
    assert r.usage.completion_tokens_details.reasoning_tokens == 3
    fake.set_default(reasoning_field="reasoning_content", reasoning_tokens=2)
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, stream=True))
    reasoning = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks]
    assert [x for x in reasoning if x] == ["thought0", " thought1"]


def test_leak_think_variants(client: openai.OpenAI, fake: FakeHandle) -> None:
    fake.script(
        {"leak_think": True, "reasoning_tokens": 2, "tokens": 1},
        {"leak_think": "close_only", "reasoning_tokens": 2, "tokens": 1},
    )
    full = client.chat.completions.create(model="m", messages=MSGS)
    assert full.choices[0].message.content == "<think>thought0 thought1</think>tok0"
    assert full.usage.completion_tokens_details.reasoning_tokens == 0
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "thought0 thought1</think>tok0"


def test_usage_variants_cost_provider_cached_degenerate(
    client: openai.OpenAI, fake: FakeHandle
) -> None:
    fake.script(
        {"cost": 0.0123, "provider": "DeepInfra", "cached_tokens": 2},
        {"no_usage": True},
        {"degenerate": True, "tokens": 6},
    )
    r = client.chat.completions.create(model="m", messages=MSGS)
    assert r.model_extra["provider"] == "DeepInfra" and r.usage.model_extra["cost"] == 0.0123
    assert r.usage.prompt_tokens_details.cached_tokens == 2
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.usage is None for c in chunks)
    r = client.chat.completions.create(model="m", messages=MSGS)
    assert r.choices[0].message.content == "111 222 333 444 111 222"


def test_requests_log_params_headers_and_ignored(client: openai.OpenAI, fake: FakeHandle) -> None:
    fake.set_default(ignore_params=["top_k", "min_p"])
    client.chat.completions.create(
        model="m",
        messages=MSGS,
        temperature=0.6,
        seed=7,
        extra_body={"top_k": 20},
        extra_headers={"X-Trace": "t1"},
    )
    (req,) = fake.requests()
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["top_k"] == 20 and req["body"]["seed"] == 7
    assert req["body"]["temperature"] == 0.6
    assert req["headers"]["authorization"] == "Bearer sk-test"
    assert req["headers"]["x-trace"] == "t1"
    assert req["ignored_params"] == ["top_k"]


def test_finish_reason_override_and_text(client: openai.OpenAI, fake: FakeHandle) -> None:
    fake.script({"finish_reason": "length", "text": "The answer is 42."})
    r = client.chat.completions.create(model="m", messages=MSGS)
    assert r.choices[0].message.content == "The answer is 42."
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4


# ------------------------------------------------------------------ faults


def test_script_is_consumed_in_order_then_default(http: httpx.Client, fake: FakeHandle) -> None:
    fake.script({"status": 503}, {"status": 429, "retry_after": 1}, {"tokens": 1})
    body = {"model": "m", "messages": MSGS}
    got = [http.post("/v1/chat/completions", json=body) for _ in range(4)]
    assert [r.status_code for r in got] == [503, 429, 200, 200]
    assert got[0].json()["error"]["code"] == 503
    assert got[1].headers["retry-after"] == "1"
    assert got[2].json()["choices"][0]["message"]["content"] == "tok0"
    assert got[3].json()["usage"]["completion_tokens"] == 5
    assert http.get("/v1/models").status_code == 200  # metadata does not consume the script


def test_sdk_sees_scripted_errors(client: openai.OpenAI, fake: FakeHandle) -> None:
    fake.script({"status": 503}, {"status": 429}, {"status": 200, "body": "not json"})
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MSGS)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=MSGS)
    with pytest.raises((openai.APIResponseValidationError, json.JSONDecodeError)):
        client.chat.completions.create(model="m", messages=MSGS)
    assert len(fake.requests()) == 3


def test_down_default_fails_health_and_reset_restores(http: httpx.Client, fake: FakeHandle) -> None:
    fake.set_default(status=503)
    assert http.get("/health").status_code == 503
    assert http.get("/v1/models").status_code == 503
    fake.reset()
    assert http.get("/health").status_code == 200


def test_pacing_keeps_one_token_per_chunk(http: httpx.Client, fake: FakeHandle) -> None:
    fake.script({"pace_tps": 500, "tokens": 4})
    body = {"model": "m", "messages": MSGS, "stream": True}
    events = sse_events(http.post("/v1/chat/completions", json=body).text)
    assert len(events) == 1 + 4 + 1 and events[-1] == "[DONE]"
    assert fake.requests()[0]["behaviour"]["pace_tps"] == 500


def test_hang_after_chunks_then_completes(http: httpx.Client, fake: FakeHandle) -> None:
    fake.script({"hang_after_chunks": 2, "hang": 0.05})
    body = {"model": "m", "messages": MSGS, "stream": True}
    events = sse_events(http.post("/v1/chat/completions", json=body).text)
    assert len(events) == 7 and events[-1] == "[DONE]"


def test_hang_before_first_byte_times_out_client(fake: FakeHandle) -> None:
    fake.script({"hang_before_first_byte": 5})
    with httpx.Client(base_url=fake.url, timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        c.post("/v1/chat/completions", json={"model": "m", "messages": MSGS})


def test_hang_after_zero_chunks_sends_headers_first(fake: FakeHandle) -> None:
    fake.script({"hang_after_chunks": 0, "hang": 5})
    body = {"model": "m", "messages": MSGS, "stream": True}
    with (
        httpx.Client(base_url=fake.url, timeout=0.2) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        with pytest.raises(httpx.ReadTimeout):
            r.read()


def test_disconnect_mid_stream(http: httpx.Client, fake: FakeHandle) -> None:
    fake.script({"disconnect_after_chunks": 3})
    got = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        http.stream(
            "POST", "/v1/chat/completions", json={"model": "m", "messages": MSGS, "stream": True}
        ) as r,
    ):
        for block in r.iter_raw():
            got += block
    assert len(sse_events(got.decode())) == 3


def test_drop_connection(http: httpx.Client, fake: FakeHandle) -> None:
    fake.script({"drop_connection": True})
    with pytest.raises(httpx.RemoteProtocolError):
        http.post("/v1/chat/completions", json={"model": "m", "messages": MSGS})


@pytest.mark.parametrize("fault", ["malformed_sse", "invalid_json"])
def test_broken_stream_event(http: httpx.Client, fake: FakeHandle, fault: str) -> None:
    fake.script({fault: True})
    body = {"model": "m", "messages": MSGS, "stream": True}
    events = sse_events(http.post("/v1/chat/completions", json=body).text)
    bad = []
    for ev in events[:-1]:
        try:
            json.loads(ev)
        except json.JSONDecodeError:
            bad.append(ev)
    assert len(bad) == 1 and events[-1] == "[DONE]"
    fake.script({fault: True})
    r = http.post("/v1/chat/completions", json={"model": "m", "messages": MSGS})
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.text)


# ------------------------------------------------------------------ control API and input


def test_control_api_rejects_bad_behaviours(http: httpx.Client) -> None:
    assert http.post("/_fake/script", json=[{"statuss": 503}]).status_code == 400
    assert http.post("/_fake/script", json=[{"status": "503"}]).status_code == 400
    assert http.post("/_fake/script", json={"status": 503}).status_code == 400
    assert http.post("/_fake/default", json={"leak_think": "maybe"}).status_code == 400
    assert http.get("/_fake/requests").json()["script_pending"] == 0


def test_bad_requests_are_400(http: httpx.Client) -> None:
    assert http.post("/v1/chat/completions", content=b"{not json").status_code == 400
    assert http.post("/v1/chat/completions", json={"model": "m"}).status_code == 400
    neg = {"model": "m", "messages": MSGS, "max_tokens": -1}
    assert http.post("/v1/chat/completions", json=neg).json()["error"]["code"] == 400


async def test_async_sdk_stream(fake: FakeHandle) -> None:
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as c:
        stream = await c.chat.completions.create(model="m", messages=MSGS, stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream])
    assert text == "tok0 tok1 tok2 tok3 tok4"


def test_subprocess_mode() -> None:
    with running_fake(process=True, tokens=2, models=["a", "b"]) as handle:
        with openai.OpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            assert [m.id for m in c.models.list()] == ["a", "b"]
            r = c.chat.completions.create(model="a", messages=MSGS)
        assert r.choices[0].message.content == "tok0 tok1"
        assert len(handle.requests()) == 1


def test_realistic_text_streams_the_passage_with_its_escapes_and_logprobs(
    client: openai.OpenAI, fake: FakeHandle
) -> None:
    """`realistic`: non-ASCII, quotes, backslashes, tabs and line breaks, one piece per chunk,
    with logprobs whose bytes are each piece's UTF-8; the whole answer is the stream joined."""
    from plumbline_kit.fakes.text import PASSAGE, pieces

    n = len(pieces()) + 7  # past the end: the passage starts again
    fake.set_default(realistic=True, tokens=n)
    kw = {"model": "m", "messages": MSGS, "logprobs": True, "top_logprobs": 3}
    whole = client.chat.completions.create(**kw)  # type: ignore[call-overload]
    text = whole.choices[0].message.content
    assert text.startswith(PASSAGE) and text[len(PASSAGE) :] == "".join(pieces()[:7])
    assert whole.usage.completion_tokens == n
    entries = whole.choices[0].logprobs.content
    assert [e.token for e in entries] == [*pieces(), *pieces()[:7]]
    assert all(bytes(e.bytes) == e.token.encode() for e in entries)
    assert all(len(e.top_logprobs) == 3 for e in entries)
    streamed = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**kw, stream=True)  # type: ignore[call-overload]
        if c.choices
    ]
    assert "".join(streamed) == text and sum(1 for s in streamed if s) == n
    for needle in ('"', "\\", "\n", "\t", "é", "日本", "🚀"):
        assert needle in text
