"""Parity by meaning (gateway/serving/dialect.py, semantics.py, capability.py): every built-in
profile said in every dialect, pure; then what fake upstreams behind the real gateway are sent."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.config import Config, Profile, builtin_profiles
from gateway.errors import ConfigError
from gateway.serving.adapt import Adapted, adapt
from gateway.serving.capability import carrier_of
from gateway.serving.profile import apply_profile
from gateway.serving.semantics import NEUTRAL
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import config_from, running_gateway

HI = [{"role": "user", "content": "hello"}]
PROFILES = sorted(builtin_profiles())
LANE = {"x-plumbline-lane": "eval"}


ARMS = (
    {"name": "node", "kind": "vllm", "base_url": "http://127.0.0.1:1/v1"},
    {"name": "llama", "kind": "llamacpp", "base_url": "http://127.0.0.1:2/v1"},
    {"name": "router", "kind": "openai", "base_url": "https://openrouter.ai/api/v1"},
    {"name": "api-b", "kind": "openai", "base_url": "https://api.example.com/v1"},
)


def arms(profile: str, **route: Any) -> Config:
    """A route of `profile` on a vLLM node, a llama.cpp node (both serving the profile),
    OpenRouter and a plain OpenAI-compatible API."""
    ups = [{"model": "m", **u} for u in ARMS]
    for u in ups:
        if u["kind"] != "openai":
            u["profile"] = profile
    names = [u["name"] for u in ARMS]
    return config_from(
        {"upstreams": ups, "models": {"r": {"profile": profile, "upstreams": names, **route}}}
    )


def adapted(cfg: Config, body: dict[str, Any] | None = None) -> dict[str, Adapted]:
    """The route's profile applied to `body`, adapted for each of its upstreams."""
    from gateway.serving.dialect import accepted_keys

    route = cfg.models["r"]
    filled = apply_profile(dict(body or {"messages": HI}), cfg.profile_for("r"), chat=True)
    accepted = accepted_keys(route.accept_unequal)
    return {
        u.name: adapt(filled, u, None, True, None, carrier_of(u, cfg), accepted)
        for u in cfg.upstreams
    }


def openai_cannot(profile: Profile) -> list[str]:
    """What a plain OpenAI-compatible API cannot be told of `profile`, read off the profile
    itself: a sampler it does not take, set to other than "off"; the thinking switch."""
    said = []
    s = profile.sampling
    for name in ("top_k", "min_p", "repetition_penalty"):
        value = getattr(s, name)
        if value is not None and value != NEUTRAL[name] and not (name == "top_k" and value < 0):
            said.append(f"api-b cannot be sent {name}={value} (kind openai)")
    for key, value in profile.chat_template_kwargs.items():
        said.append(f"api-b cannot be sent {key}={str(value).lower()} (kind openai)")
    return said


@pytest.mark.parametrize("name", PROFILES)
def test_every_builtin_profile_is_at_parity_on_nodes_and_openrouter(name: str) -> None:
    cfg = arms(name)
    out = adapted(cfg)
    assert out["node"].params_hash == out["llama"].params_hash == out["router"].params_hash
    assert out["node"].gaps == out["llama"].gaps == out["router"].gaps == ()
    named = openai_cannot(cfg.profiles[name])
    assert [str(g) for g in out["api-b"].gaps] == named
    # A plain API is refused exactly when the profile asks what it cannot be told.
    assert (out["api-b"].params_hash == out["node"].params_hash) is (not named)


def test_the_enumeration_covers_profiles_a_plain_api_cannot_carry() -> None:
    """The profile test above can fail both ways: some built-ins need top_k or a thinking
    switch (refused on a plain API), and at least one asks nothing a plain API cannot carry."""
    refused = [p for p in PROFILES if openai_cannot(arms(p).profiles[p])]
    assert {"qwen3-instruct", "qwen3-thinking", "gemma-4", "deepseek", "minimax"} <= set(refused)
    assert set(PROFILES) - set(refused) >= {"smollm2"}


def test_openrouter_is_told_the_thinking_switch_and_to_require_parameters() -> None:
    out = adapted(arms("qwen3-instruct"))
    router = out["router"]
    assert router.body["reasoning"] == {"enabled": False}
    assert router.body["top_k"] == 20 and "min_p" not in router.body  # 0 is its default
    assert "chat_template_kwargs" not in router.body and router.require
    assert out["node"].body["chat_template_kwargs"] == {"enable_thinking": False}
    assert not out["node"].require and not out["api-b"].require


def test_a_thinking_budget_and_effort_in_each_dialect() -> None:
    cfg = arms("qwen3-thinking")
    body = {"messages": HI, "thinking_token_budget": 300}
    out = adapted(cfg, body)
    assert out["node"].body["thinking_token_budget"] == 300  # vLLM with a reasoning parser
    assert out["router"].body["reasoning"] == {"enabled": True, "max_tokens": 300}
    assert [str(g) for g in out["llama"].gaps] == [
        "llama cannot be sent thinking_token_budget=300 (kind llamacpp)"
    ]
    assert out["router"].params_hash == out["node"].params_hash != out["llama"].params_hash
    effort = adapted(arms("gpt-oss"))
    assert effort["router"].body["reasoning"] == {"effort": "medium"}
    assert effort["api-b"].body["reasoning_effort"] == "medium"
    assert effort["node"].body["reasoning_effort"] == "medium"


def test_llamacpp_carries_only_the_template_it_was_launched_with() -> None:
    cfg = arms("qwen3-instruct")
    asked = {"messages": HI, "chat_template_kwargs": {"enable_thinking": True}}
    out = adapted(cfg, asked)
    assert [str(g) for g in out["llama"].gaps] == [
        "llama cannot be sent enable_thinking=true (kind llamacpp: launched with "
        "enable_thinking=false)"
    ]
    assert out["node"].gaps == () and out["node"].params_hash != out["llama"].params_hash


def test_a_route_may_accept_named_differences() -> None:
    cfg = arms("qwen3-instruct", accept_unequal=["top_k", "enable_thinking"])
    out = adapted(cfg)
    api = out["api-b"]
    assert api.params_hash == out["node"].params_hash
    unsent, accepted = api.unsent()
    assert unsent == [] and [str(g) for g in accepted] == [
        "api-b cannot be sent top_k=20 (kind openai)",
        "api-b cannot be sent enable_thinking=false (kind openai)",
    ]
    partly = adapted(arms("qwen3-instruct", accept_unequal=["top_k"]))
    assert partly["api-b"].params_hash != partly["node"].params_hash


def test_an_unknown_field_in_accept_unequal_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="accept_unequal"):
        arms("qwen3-instruct", accept_unequal=["top_kk"])


def test_require_parameters_said_false_is_a_named_gap() -> None:
    cfg = config_from(
        {
            "upstreams": [
                {
                    "name": "or",
                    "kind": "openai",
                    "base_url": "https://openrouter.ai/api/v1",
                    "model": "m",
                    "provider": {"only": ["Together"], "require_parameters": False},
                }
            ],
            "models": {"r": {"profile": "smollm2", "upstreams": ["or"]}},
        }
    )
    (u,) = cfg.upstreams
    body = apply_profile({"messages": HI}, cfg.profile_for("r"), chat=True)
    got = adapt(body, u, None, True, None, carrier_of(u, cfg))
    assert [str(g) for g in got.gaps] == [
        'or cannot be sent require_parameters=["temperature","top_p"] (kind openrouter: its '
        "config says provider.require_parameters = false, so a provider may ignore it)"
    ]


# ---- through the gateway: what each dialect is actually sent ---------------------------------


@contextlib.contextmanager
def four_fakes() -> Iterator[dict[str, FakeHandle]]:
    with contextlib.ExitStack() as stack:
        yield {n: stack.enter_context(running_fake()) for n in ("node", "llama", "router", "api-b")}


def served(fakes: dict[str, FakeHandle], **route: Any) -> Config:
    """The four arms on fakes; the OpenRouter one is OpenRouter by its provider routing."""
    kinds = {"node": "vllm", "llama": "llamacpp", "router": "openai", "api-b": "openai"}
    ups = []
    for name, fake in fakes.items():
        up: dict[str, Any] = {"name": name, "kind": kinds[name], "base_url": fake.base_url}
        up["model"] = "fake-model"
        if kinds[name] != "openai":
            up["profile"] = "qwen3-instruct"
        if name == "llama":
            up["stream_usage"] = False
        if name == "router":
            up["provider"] = {"sort": "price"}
        ups.append(up)
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": ups,
            "models": {"q": {"profile": "qwen3-instruct", "upstreams": list(fakes), **route}},
        }
    )


def ask_each(url: str, names: list[str], **extra: Any) -> dict[str, dict[str, str]]:
    """One eval-lane request pinned to each upstream; the answers' headers by upstream."""
    c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)
    out = {}
    for name in names:
        raw = c.chat.completions.with_raw_response.create(
            model="q", messages=HI, extra_headers={**LANE, "x-plumbline-upstream": name}, **extra
        )
        assert raw.headers["x-plumbline-upstream"] == name
        out[name] = dict(raw.headers)
    return out


def body_of(fake: FakeHandle) -> dict[str, Any]:
    (request,) = [r for r in fake.requests() if r["path"].endswith("/chat/completions")]
    body: dict[str, Any] = request["body"]
    return body


def test_each_dialect_is_sent_the_profile_in_its_own_words() -> None:
    with four_fakes() as fakes, running_gateway(served(fakes)) as url:
        heads = ask_each(url, list(fakes))
        node, cpp, router, api = (body_of(fakes[n]) for n in fakes)
    sampling = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}
    assert {k: node[k] for k in sampling} == {k: cpp[k] for k in sampling} == sampling
    assert node["chat_template_kwargs"] == {"enable_thinking": False}
    assert node["repetition_penalty"] == cpp["repeat_penalty"] == 1.0
    assert "chat_template_kwargs" not in cpp  # llama-cpp-python has it from its launch
    assert router["reasoning"] == {"enabled": False}
    assert router["provider"] == {"sort": "price", "require_parameters": True}
    assert router["top_k"] == 20 and "chat_template_kwargs" not in router
    assert not {"top_k", "min_p", "chat_template_kwargs", "reasoning", "provider"} & set(api)
    assert api["temperature"] == 0.7 and api["top_p"] == 0.8
    hashes = {n: h["x-plumbline-params-hash"] for n, h in heads.items()}
    assert hashes["node"] == hashes["llama"] == hashes["router"] != hashes["api-b"]
    assert heads["api-b"]["x-plumbline-unsent"] == (
        "api-b cannot be sent top_k=20 (kind openai); "
        "api-b cannot be sent enable_thinking=false (kind openai)"
    )
    assert not any("x-plumbline-unsent" in heads[n] for n in ("node", "llama", "router"))
    said = heads["node"]["x-plumbline-semantics"]
    assert said.startswith("temperature=0.7, top_p=0.8, top_k=20, min_p=0")
    assert "enable_thinking=false" in said
    assert heads["router"]["x-plumbline-semantics"] == said


def test_an_accepted_difference_is_at_parity_and_said() -> None:
    with four_fakes() as fakes:
        cfg = served(fakes, accept_unequal=["top_k", "enable_thinking"])
        with running_gateway(cfg) as url:
            heads = ask_each(url, ["node", "api-b"])
    assert heads["api-b"]["x-plumbline-params-hash"] == heads["node"]["x-plumbline-params-hash"]
    assert "x-plumbline-unsent" not in heads["api-b"]
    assert heads["api-b"]["x-plumbline-accepted-unequal"] == (
        "api-b cannot be sent top_k=20 (kind openai); "
        "api-b cannot be sent enable_thinking=false (kind openai)"
    )


def test_a_thinking_budget_reaches_openrouter_as_reasoning_max_tokens() -> None:
    with four_fakes() as fakes, running_gateway(served(fakes)) as url:
        ask_each(url, ["router"], extra_body={"thinking_token_budget": 128})
        router = body_of(fakes["router"])
    assert router["reasoning"] == {"enabled": False, "max_tokens": 128}


def test_what_a_client_names_is_said_safely_in_a_header() -> None:
    """A template variable a client names is part of a gap's text, which travels in a response
    header: anything but printable ASCII is written as JSON."""
    cfg = arms("smollm2")
    out = adapted(cfg, {"messages": HI, "chat_template_kwargs": {"bad\r\nx-evil: 1": "ü"}})
    (gap,) = out["api-b"].gaps
    assert str(gap) == 'api-b cannot be sent "bad\\r\\nx-evil: 1"="\\u00fc" (kind openai)'
    assert str(gap).isascii() and str(gap).isprintable()
