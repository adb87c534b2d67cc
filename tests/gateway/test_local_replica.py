"""The real path: the `openai` client -> gateway -> a real vLLM CPU replica / llama.cpp server
serving SmolLM2-135M. Protocol facts only — never the tiny model's wording."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.config import Config
from gateway.ledger.record import Record
from tests.harness import ListSink, running_gateway, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(local_stack: Config) -> Iterator[tuple[str, ListSink]]:
    records = ListSink()
    with running_gateway(local_stack, sinks=[records]) as url:
        yield url, records


@pytest.fixture
def client(served: tuple[str, ListSink]) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[0], api_key="unused", max_retries=0, timeout=120)


def last(served: tuple[str, ListSink], n: int = 1) -> Record:
    wait_for(lambda: len(served[1].records) >= n)
    return served[1].records[-1]


MESSAGES = [{"role": "user", "content": "Name one planet."}]


def test_the_real_engine_is_fingerprinted(local_stack: Config) -> None:
    """vLLM's own /version and /tokenize of the probe conversation (its chat template), learnt
    by the health prober (which the shared stack's gateway runs without)."""
    import vllm

    probed = local_stack.model_copy(
        update={"server": local_stack.server.model_copy(update={"health_interval_s": 0.5})}
    )
    with running_gateway(probed) as url:
        upstreams = lambda: httpx.get(url.removesuffix("/v1") + "/health").json()["upstreams"]  # noqa: E731
        wait_for(lambda: upstreams()["smol-vllm"]["engine"] is not None, timeout=30)
        fingerprint = upstreams()["smol-vllm"]["engine"]
        assert upstreams()["smol-llamacpp"]["engine"] is None
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        raw = client.chat.completions.with_raw_response.create(
            model="smollm2", messages=MESSAGES, max_tokens=2
        )
    assert re.fullmatch(rf"vllm {re.escape(vllm.__version__)} template [0-9a-f]{{12}}", fingerprint)
    assert raw.headers["x-plumbline-engine"] == fingerprint


def test_models_lists_the_public_names(client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list().data}
    assert ids == {"smollm2", "smollm2-llamacpp"}


def test_non_streaming_chat_on_vllm(client: openai.OpenAI, served: Any) -> None:
    before = len(served[1].records)
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2", messages=MESSAGES, max_tokens=24
    )
    reply = raw.parse()
    assert raw.headers["x-plumbline-upstream"] == "smol-vllm"
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.role == "assistant" and choice.message.content
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens <= 24
    record = last(served, before + 1)
    assert record.prompt_tokens == reply.usage.prompt_tokens
    assert record.completion_tokens == reply.usage.completion_tokens
    assert not record.usage_estimated and record.upstream == "smol-vllm"


def test_streaming_chat_on_vllm_with_usage(client: openai.OpenAI, served: Any) -> None:
    before = len(served[1].records)
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=MESSAGES,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish and finish[-1] in ("stop", "length")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    record = last(served, before + 1)
    assert record.completion_tokens == chunks[-1].usage.completion_tokens
    assert record.ttft_s is not None and record.e2e_s >= record.ttft_s


def test_cached_prompt_tokens_reach_the_record(client: openai.OpenAI, served: Any) -> None:
    """The replica is launched so that vLLM reports cached prompt tokens (it leaves them out
    unless told): the same long prompt twice, and the second one's record says how much of it
    the prefix cache served."""
    long = [{"role": "user", "content": "Rivers, bridges and streets of an old city. " * 16}]
    before = len(served[1].records)
    for _ in range(2):
        reply = client.chat.completions.create(model="smollm2", messages=long, max_tokens=2)
    record = last(served, before + 2)
    details = reply.usage.prompt_tokens_details  # type: ignore[union-attr]
    assert details is not None and details.cached_tokens and details.cached_tokens > 0
    assert record.cached_tokens == details.cached_tokens <= record.prompt_tokens


def test_stream_without_asking_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="smollm2", messages=MESSAGES, max_tokens=8, stream=True
        )
    )
    assert all(c.usage is None for c in chunks)


def test_truncation_is_marked_on_a_real_replica(client: openai.OpenAI, served: Any) -> None:
    before = len(served[1].records)
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Write a long story about a cat."}],
        max_tokens=3,
    )
    assert raw.parse().choices[0].finish_reason == "length"
    assert raw.headers["x-plumbline-truncated"] == "length"
    record = last(served, before + 1)
    assert record.truncated and record.max_tokens == 3


def test_logprobs_and_n_pass_through(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="smollm2", messages=MESSAGES, max_tokens=4, n=2, logprobs=True, top_logprobs=3, seed=7
    )
    assert len(reply.choices) == 2
    for choice in reply.choices:
        content = choice.logprobs.content
        assert content and all(len(entry.top_logprobs) == 3 for entry in content)
        assert all(entry.logprob <= 0 for entry in content)


def test_completions_endpoint_on_vllm(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="smollm2", prompt="The sky is", max_tokens=5)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 5


def test_llamacpp_stream_usage_is_counted_by_the_gateway(
    client: openai.OpenAI, served: Any
) -> None:
    before = len(served[1].records)
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2-llamacpp", messages=MESSAGES, max_tokens=12, stream=True
    )
    chunks = list(raw.parse())
    assert raw.headers["x-plumbline-upstream"] == "smol-llamacpp"
    streamed = sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
    record = last(served, before + 1)
    assert record.usage_estimated
    assert record.completion_tokens == streamed > 0


def test_bad_input_against_the_real_stack(served: Any) -> None:
    r = httpx.post(
        f"{served[0]}/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user"}], "n": 0},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
