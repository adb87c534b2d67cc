"""How a request is said to each kind of upstream (`gateway.serving.upstream.body_for`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from gateway.config import Config, Upstream
from gateway.serving.upstream import body_for


def said(kind: str, body: dict[str, Any], cap: str | None, **extra: Any) -> dict[str, Any]:
    upstream = Upstream(name="u", kind=kind, base_url="http://127.0.0.1:1/v1", model="m", **extra)
    return orjson.loads(body_for(upstream, {"model": "public", **body}, False, thinking_cap=cap))


def test_model_and_provider_are_the_upstreams() -> None:
    out = said("openai", {}, None, provider={"only": ["X"], "require_parameters": True})
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
    out = said("openai", body, "reasoning.max_tokens")
    assert out["reasoning"] == reasoning and "thinking_token_budget" not in out


def test_vllm_keeps_the_budget_only_with_a_reasoning_parser() -> None:
    tell = "thinking_token_budget"
    assert said("vllm", {"thinking_token_budget": 64}, tell)["thinking_token_budget"] == 64
    assert "thinking_token_budget" not in said("vllm", {"thinking_token_budget": 64}, None)
    assert "thinking_token_budget" not in said("llamacpp", {"thinking_token_budget": 64}, None)


def test_unlimited_is_no_cap() -> None:
    assert said("openai", {"thinking_token_budget": -1}, "reasoning.max_tokens") == {"model": "m"}
    assert said("vllm", {"thinking_token_budget": -1}, "thinking_token_budget") == {"model": "m"}


def _cap(upstream: dict[str, Any]) -> str | None:
    profiles = {"thinks": {"reasoning_parser": "qwen3"}, "plain": {}}
    config = Config.model_validate(
        {
            "upstreams": [{"name": "u", "model": "m", **upstream}],
            "models": {"m": {"upstreams": ["u"]}},
            "profiles": profiles,
        }
    )
    return config.thinking_cap(config.upstream("u"))


@pytest.mark.parametrize(
    ("upstream", "cap"),
    [
        (
            {"kind": "vllm", "base_url": "http://10.0.0.1/v1", "profile": "thinks"},
            "thinking_token_budget",
        ),
        ({"kind": "vllm", "base_url": "http://10.0.0.1/v1", "profile": "plain"}, None),
        ({"kind": "llamacpp", "base_url": "http://10.0.0.1/v1"}, None),
        ({"kind": "openai", "base_url": "https://openrouter.ai/api/v1"}, "reasoning.max_tokens"),
        (
            {"kind": "openai", "base_url": "https://gw.example/v1", "provider": {"only": ["X"]}},
            "reasoning.max_tokens",
        ),
        # OpenAI's own API refuses `reasoning` on chat completions: not guessed.
        ({"kind": "openai", "base_url": "https://api.openai.com/v1"}, None),
        # Said outright: a remote vLLM behind an API, an OpenRouter-like reseller, or none.
        (
            {
                "kind": "openai",
                "base_url": "https://x.example/v1",
                "thinking_budget": "thinking_token_budget",
            },
            "thinking_token_budget",
        ),
        (
            {
                "kind": "openai",
                "base_url": "https://openrouter.ai/api/v1",
                "thinking_budget": "none",
            },
            None,
        ),
    ],
)
def test_how_each_upstream_is_told_a_thinking_budget(
    upstream: dict[str, Any], cap: str | None
) -> None:
    assert _cap(upstream) == cap


def test_a_budget_field_vllm_would_refuse_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="thinking_budget: vLLM refuses"):
        _cap(
            {
                "kind": "vllm",
                "base_url": "http://10.0.0.1/v1",
                "profile": "plain",
                "thinking_budget": "thinking_token_budget",
            }
        )


def test_llamacpp_is_said_its_own_names() -> None:
    schema = {"type": "object"}
    body = {
        "max_completion_tokens": 7,
        "repetition_penalty": 1.0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    out = said("llamacpp", body, None)
    assert out["max_tokens"] == 7 and "max_completion_tokens" not in out
    assert out["repeat_penalty"] == 1.0 and "repetition_penalty" not in out
    assert out["response_format"] == {"type": "json_object", "schema": schema}
    # max_completion_tokens wins over max_tokens, as on vLLM; a format without a schema is
    # llama.cpp's plain JSON mode; other kinds are sent the names as they are.
    both = said("llamacpp", {"max_tokens": 100, "max_completion_tokens": 7}, None)
    assert both["max_tokens"] == 7
    bare = {"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}
    assert said("llamacpp", bare, None)["response_format"] == {"type": "json_object"}
    assert said("vllm", body, None) == {**body, "model": "m"}
