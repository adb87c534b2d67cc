"""The relay as a client sees it, with the real `openai` client: OpenRouter-shaped streams
(comments before the first event, the provider on every chunk, an error chunk mid-stream), the
public model name on every answer, usage written by the gateway for upstreams that send none,
and the prompt counted on streams that broke before their usage."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from gateway.serving.accounting import prompt_estimate
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, running_gateway

MESSAGES = [{"role": "user", "content": "say hello to the relay"}]


def config(base_url: str, fallback: str | None = None, **upstream: Any) -> Any:
    ups = [{"name": "a", "kind": "openai", "base_url": base_url, "model": "vendor/slug-v1"}]
    if fallback:
        ups.append({"name": "b", "kind": "vllm", "base_url": fallback, "model": "fake-model"})
    ups[0].update(upstream)
    return config_from(
        {
            "server": {"health_interval_s": 0, "retries": 0, "retry_backoff_s": 0},
            "upstreams": ups,
            "models": {"smol": {"upstreams": ["a"], "fallback": ["b"] if fallback else []}},
        }
    )


@contextlib.contextmanager
def client(cfg: Any, sink: ListSink) -> Iterator[openai.OpenAI]:
    with (
        running_gateway(cfg, sinks=[sink]) as url,
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c,
    ):
        yield c


def sse(*events: dict[str, Any] | str) -> str:
    """An upstream's stream: dicts as data events, strings as they are (comments)."""
    out = []
    for e in events:
        out.append(e if isinstance(e, str) else "data: " + orjson.dumps(e).decode() + "\n\n")
    return "".join(out) + "data: [DONE]\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "gen-1",
        "provider": "Together",
        "model": "vendor/slug-v1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


PROCESSING = ": OPENROUTER PROCESSING\n\n"


def test_comments_before_the_first_event_are_not_an_error(fake: FakeHandle) -> None:
    """OpenRouter opens a stream with `: OPENROUTER PROCESSING` comments: the answer streams,
    with the provider (named on its chunks) in the headers and the public model on every chunk."""
    body = sse(
        PROCESSING,
        PROCESSING,
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": w}) for w in ["Hello", " from", " the", " relay"]),
        PROCESSING,
        chunk({}, "stop"),
        chunk({}, usage={"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}),
    )
    fake.script({"body": body})
    sink = ListSink()
    with client(config(fake.base_url), sink) as c:
        raw = c.chat.completions.with_raw_response.create(
            model="smol", messages=MESSAGES, stream=True
        )
        chunks = list(raw.parse())
    assert raw.headers["x-plumbline-provider"] == "Together"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == (
        "Hello from the relay"
    )
    assert {ch.model for ch in chunks} == {"smol"}
    [record] = sink.records
    assert record.status == 200 and record.provider == "Together"
    assert (record.prompt_tokens, record.completion_tokens) == (7, 4)


def test_provider_header_on_whole_answers_too(fake: FakeHandle) -> None:
    fake.script({"provider": "Fireworks"})
    sink = ListSink()
    with client(config(fake.base_url), sink) as c:
        raw = c.chat.completions.with_raw_response.create(model="smol", messages=MESSAGES)
    assert raw.headers["x-plumbline-provider"] == "Fireworks"
    assert raw.parse().model == "smol"


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        # OpenRouter: an error object and a choice whose finish_reason is "error"
        (
            {
                "error": {"code": 429, "message": "Rate limit exceeded"},
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
            },
            429,
        ),
        ({"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}, 502),
        ({"error": {"message": "overloaded"}}, 502),
    ],
    ids=["error-and-finish", "finish-only", "error-only"],
)
def test_an_error_chunk_mid_stream_is_an_error(
    fake: FakeHandle, fake2: FakeHandle, failure: dict[str, Any], status: int
) -> None:
    head = {"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Half an"}),
        {**head, **failure},
    )
    fake.script({"body": body})
    sink = ListSink()
    with client(config(fake.base_url, fake2.base_url), sink) as c:
        stream = c.chat.completions.create(model="smol", messages=MESSAGES, stream=True)
        got = []
        with pytest.raises(openai.APIError) as caught:
            for ch in stream:
                got.append(ch)
    assert "".join(ch.choices[0].delta.content or "" for ch in got if ch.choices) == "Half an"
    assert "upstream a" in str(caught.value)
    [record] = sink.records
    assert record.status == status and record.error_class == "UpstreamStreamError"
    assert record.finish_reason == "error"
    assert [(a.upstream, a.outcome) for a in record.attempts] == [("a", "ok")]
    assert record.prompt_tokens > 0 and record.usage_estimated  # no usage came: estimated
    assert fake2.requests() == []  # the answer had begun: no switch


def test_an_error_as_the_first_event_falls_back(fake: FakeHandle, fake2: FakeHandle) -> None:
    """Nothing reached the client yet: the next upstream answers."""
    fake.script({"body": sse(PROCESSING, {"error": {"code": 503, "message": "no provider"}})})
    sink = ListSink()
    with client(config(fake.base_url, fake2.base_url), sink) as c:
        chunks = list(c.chat.completions.create(model="smol", messages=MESSAGES, stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    [record] = sink.records
    assert [(a.upstream, a.outcome) for a in record.attempts] == [
        ("a", "upstream_error"),
        ("b", "ok"),
    ]


# ---- usage the upstream did not send --------------------------------------------------------


@pytest.mark.parametrize("stream_usage", [True, False])
def test_usage_chunk_for_a_client_that_asked_when_the_upstream_sends_none(
    fake: FakeHandle, stream_usage: bool
) -> None:
    """llama.cpp sends no usage in streams. `stream_usage = false` says so: the upstream is not
    asked for it (no `stream_options`); either way a client that asked gets a usage chunk,
    counted by the gateway (the record says estimated)."""
    fake.set_default(no_usage=True, tokens=5)
    sink = ListSink()
    cfg = config(fake.base_url, stream_usage=stream_usage)
    with client(cfg, sink) as c:
        chunks = list(
            c.chat.completions.create(
                model="smol",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 5
    assert last.usage.prompt_tokens == prompt_estimate({"messages": MESSAGES}) > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + 5
    assert last.model == "smol"
    assert all(ch.usage is None for ch in chunks[:-1])
    [record] = sink.records
    assert record.usage_estimated and record.completion_tokens == 5
    sent = fake.requests()[0]["body"]
    assert ("stream_options" in sent) is stream_usage


def test_no_usage_chunk_for_a_client_that_did_not_ask(fake: FakeHandle) -> None:
    fake.set_default(no_usage=True, tokens=5)
    sink = ListSink()
    with client(config(fake.base_url), sink) as c:
        chunks = list(c.chat.completions.create(model="smol", messages=MESSAGES, stream=True))
    assert all(ch.usage is None for ch in chunks) and chunks[-1].choices


def test_upstream_usage_is_relayed_not_replaced(fake: FakeHandle) -> None:
    sink = ListSink()
    with client(config(fake.base_url), sink) as c:
        chunks = list(
            c.chat.completions.create(
                model="smol",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    usages = [ch.usage for ch in chunks if ch.usage is not None]
    assert len(usages) == 1 and not sink.records[0].usage_estimated


# ---- the public model name ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_answers_carry_the_public_model_name(fake: FakeHandle, stream: bool) -> None:
    """The upstream's id (a provider's slug, a local path) stays behind the gateway."""
    sink = ListSink()
    with client(config(fake.base_url), sink) as c:
        if stream:
            chats = list(c.chat.completions.create(model="smol", messages=MESSAGES, stream=True))
            texts = list(c.completions.create(model="smol", prompt="a b c", stream=True))
            models = {x.model for x in [*chats, *texts]}
            assert len(chats) > 3 and len(texts) > 3
        else:
            answer = c.chat.completions.create(model="smol", messages=MESSAGES)
            text = c.completions.create(model="smol", prompt="a b c")
            models = {answer.model, text.model}
    assert models == {"smol"}
    assert [r["body"]["model"] for r in fake.requests()] == ["vendor/slug-v1"] * 2


def test_broken_stream_counts_the_prompt(fake: FakeHandle) -> None:
    fake.script({"disconnect_after_chunks": 3})
    sink = ListSink()
    with client(config(fake.base_url), sink) as c, pytest.raises(openai.APIError):
        list(c.chat.completions.create(model="smol", messages=MESSAGES, stream=True))
    [record] = sink.records
    assert record.status == 502
    assert record.prompt_tokens == prompt_estimate({"messages": MESSAGES}) > 0
    assert record.usage_estimated


def test_prompt_estimate() -> None:
    assert prompt_estimate({"prompt": [1, 2, 3]}) == 3
    assert prompt_estimate({"prompt": "x" * 40}) == 10
    assert prompt_estimate({"messages": [{"role": "user", "content": "x" * 24}]}) == 10
    parts = [{"type": "text", "text": "x" * 24}, {"type": "image_url"}]
    assert prompt_estimate({"messages": [{"role": "user", "content": parts}]}) == 10
    assert prompt_estimate({}) == 0
