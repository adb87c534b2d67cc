"""A real vLLM CPU replica of SmolLM2, started by the supervisor from the converted folder.

Protocol facts only (status, ids, finish_reason, usage present or absent), never wording.
"""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from deploy.supervisor import Replica

pytestmark = pytest.mark.slow

SERVED_NAME = "smol"  # as the vllm_replica fixture serves it
MESSAGES = [{"role": "user", "content": "Say hello."}]
MAX_TOKENS = 8
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def client(vllm_replica: Replica) -> OpenAI:
    return OpenAI(base_url=vllm_replica.base_url, api_key="unused", max_retries=0)


def test_health_and_models_list_the_served_name(vllm_replica: Replica) -> None:
    root = vllm_replica.base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health", trust_env=False).status_code == 200
    models = httpx.get(f"{vllm_replica.base_url}/models", trust_env=False).json()["data"]
    spec = vllm_replica.spec
    assert [(m["id"], m["max_model_len"]) for m in models] == [
        (spec.served_model_name, spec.max_model_len)
    ]


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
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == MAX_TOKENS


def test_stream_ends_with_a_usage_chunk_when_asked(client: OpenAI) -> None:
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
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert 0 < last.usage.completion_tokens <= MAX_TOKENS
    assert all(c.usage is None for c in chunks[:-1])


def test_unknown_model_is_a_404(client: OpenAI) -> None:
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="nope", messages=MESSAGES, max_tokens=1)  # type: ignore[arg-type]


def test_auto_tool_choice_is_enabled(client: OpenAI) -> None:
    """Without --enable-auto-tool-choice and a parser, vLLM answers this request with a 400."""
    reply = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice="auto",
        max_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert reply.choices[0].finish_reason in {"stop", "length", "tool_calls"}
