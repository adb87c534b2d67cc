"""How a request is said to each kind of upstream (`gateway.upstream.body_for`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import Upstream
from gateway.upstream import body_for


def said(kind: str, body: dict[str, Any], caps: bool, **extra: Any) -> dict[str, Any]:
    upstream = Upstream(name="u", kind=kind, base_url="http://127.0.0.1:1/v1", model="m", **extra)
    return orjson.loads(body_for(upstream, {"model": "public", **body}, False, caps_thinking=caps))


def test_model_and_provider_are_the_upstreams() -> None:
    out = said("openai", {}, False, provider={"only": ["X"], "require_parameters": True})
    assert out == {"model": "m", "provider": {"only": ["X"], "require_parameters": True}}


@pytest.mark.parametrize(
    ("body", "reasoning"),
    [
        ({"thinking_token_budget": 64}, {"max_tokens": 64}),
        (
            {"thinking_token_budget": 64, "reasoning": {"exclude": True}},
            {"exclude": True, "max_tokens": 64},
        ),
        # The client said how much to reason in OpenRouter's own words: theirs stands.
        ({"thinking_token_budget": 64, "reasoning": {"effort": "low"}}, {"effort": "low"}),
        ({"thinking_token_budget": 64, "reasoning": {"max_tokens": 9}}, {"max_tokens": 9}),
    ],
)
def test_api_providers_get_openrouters_reasoning_max_tokens(
    body: dict[str, Any], reasoning: dict[str, Any]
) -> None:
    out = said("openai", body, True)
    assert out["reasoning"] == reasoning and "thinking_token_budget" not in out


def test_vllm_keeps_the_budget_only_with_a_reasoning_parser() -> None:
    assert said("vllm", {"thinking_token_budget": 64}, True)["thinking_token_budget"] == 64
    assert "thinking_token_budget" not in said("vllm", {"thinking_token_budget": 64}, False)
    assert "thinking_token_budget" not in said("llamacpp", {"thinking_token_budget": 64}, False)


def test_unlimited_is_no_cap() -> None:
    assert said("openai", {"thinking_token_budget": -1}, True) == {"model": "m"}
    assert said("vllm", {"thinking_token_budget": -1}, True) == {"model": "m"}
