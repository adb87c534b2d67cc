"""A real llama.cpp server of the SmolLM2 GGUF, started by the supervisor.

Protocol facts only. These pin down the llama.cpp behaviours the gateway must work around: it
sends no usage chunk in streams even when asked, and (with ``--interrupt_requests false``)
a second request does not cut a running stream short.
"""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from deploy.supervisor import Replica

pytestmark = pytest.mark.slow

SERVED_NAME = "smol"  # as the llamacpp_replica fixture serves it
MESSAGES = [{"role": "user", "content": "Say hello."}]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def client(llamacpp_replica: Replica) -> OpenAI:
    return OpenAI(base_url=llamacpp_replica.base_url, api_key="unused", max_retries=0)


def test_models_lists_the_alias(llamacpp_replica: Replica) -> None:
    response = httpx.get(f"{llamacpp_replica.base_url}/models", trust_env=False)
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [SERVED_NAME]


def test_chat_completion_reports_usage_and_finish_reason(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=SERVED_NAME,
        messages=MESSAGES,
        max_tokens=MAX_TOKENS,
        temperature=0,  # type: ignore[arg-type]
    )
    (choice,) = reply.choices
    assert choice.finish_reason in {"stop", "length"}
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 0
    assert 0 < reply.usage.completion_tokens <= MAX_TOKENS
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == MAX_TOKENS


def test_stream_carries_no_usage_even_when_asked(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=SERVED_NAME,
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f is not None] in (["stop"], ["length"])
    assert all(getattr(c, "usage", None) is None for c in chunks)


def test_a_second_request_does_not_cut_a_running_stream(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": "Count from one to fifty in words."}],
        max_tokens=48,
        temperature=0,
        stream=True,
    )
    chunks = iter(stream)
    first = next(chunks)
    assert first.choices
    other = client.chat.completions.create(
        model=SERVED_NAME,
        messages=MESSAGES,
        max_tokens=2,
        temperature=0,  # type: ignore[arg-type]
    )
    assert other.choices[0].finish_reason in {"stop", "length"}
    rest = list(chunks)
    finishes = [c.choices[0].finish_reason for c in rest if c.choices]
    assert [f for f in finishes if f is not None] in (["stop"], ["length"])


def test_a_prompt_of_hundreds_of_tokens_is_answered(
    client: OpenAI, llamacpp_replica: Replica
) -> None:
    """A -march=native build on an AMX host died here (SIGILL in ``tileloadd``): short prompts
    decode through other kernels, a prompt of a few hundred tokens takes the batched matmul."""
    words = " ".join(f"item{i}" for i in range(200))
    reply = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": f"Here is a list: {words}. Which item is first?"}],
        max_tokens=MAX_TOKENS,
        temperature=0,  # type: ignore[arg-type]
    )
    assert reply.usage is not None
    assert reply.usage.prompt_tokens >= 300
    assert reply.choices[0].finish_reason in {"stop", "length"}
    assert llamacpp_replica.process.poll() is None  # still serving
