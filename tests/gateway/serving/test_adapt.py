"""Per-upstream adaptation (gateway/serving/adapt.py): capability, parity, window — pure and end to
end
through the real gateway, the real `openai` / `anthropic` clients and fake upstreams."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.config import Upstream
from gateway.edge.doors.openai.fields import CHAT_POLICY, COMPLETIONS_POLICY
from gateway.edge.doors.openai.protocol import ChatRequest, CompletionRequest
from gateway.edge.doors.policy import markdown
from gateway.errors import ContextExceeded, Unfit
from gateway.serving.adapt import adapt, capability_markdown, prompt_bounds
from gateway.serving.profile import NEUTRAL, params_hash
from gateway.serving.semantics import Semantics
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import ListSink, config_from, running_gateway, wait_for

HI = [{"role": "user", "content": "hello"}]


def upstream(kind: str, **extra: Any) -> Upstream:
    base = extra.pop("base_url", "http://127.0.0.1:1/v1")
    return Upstream(name=f"u-{kind}", kind=kind, base_url=base, model="m", **extra)


def config(*ups: dict[str, Any], models: dict[str, Any] | None = None) -> Any:
    names = [u["name"] for u in ups]
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [{"model": "fake-model", **u} for u in ups],
            "models": models or {"smol": {"profile": "smollm2", "upstreams": names}},
        }
    )


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)


def sent(fake: FakeHandle) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests() if r["path"].endswith("/completions")]


# ---- pure ----------------------------------------------------------------------------------


def test_vllm_only_fields_are_stripped_per_kind() -> None:
    kwargs = {"enable_thinking": False}
    body = {"model": "x", "messages": HI, "top_k": 20, "min_p": 0.0, "chat_template_kwargs": kwargs}
    openai_api = adapt(body, upstream("openai"), None, complete=True)
    assert openai_api.stripped == ("top_k", "min_p", "chat_template_kwargs")
    assert not {"top_k", "min_p", "chat_template_kwargs"} & set(openai_api.body)
    # OpenRouter takes top_k and min_p; an upstream's `accepts` adds to its kind's table.
    router = adapt(body, upstream("openai", base_url="https://openrouter.ai/api/v1"), None, True)
    assert router.stripped == ("chat_template_kwargs",)
    routed = upstream("openai", provider={"only": ["Together"]})  # OpenRouter's routing
    assert adapt(body, routed, None, True).stripped == ("chat_template_kwargs",)
    told = adapt(body, upstream("openai", accepts=["top_k"]), None, True)
    assert told.stripped == ("min_p", "chat_template_kwargs")
    assert adapt(body, upstream("vllm"), None, True).stripped == ()
    assert body["top_k"] == 20  # the door's body is left as it was


def test_a_field_whose_loss_changes_the_answer_is_refused() -> None:
    body = {"model": "x", "messages": HI, "guided_json": {"type": "object"}}
    with pytest.raises(Unfit, match=r"'guided_json' cannot be served by upstream 'u-openai'"):
        adapt(body, upstream("openai"), None, True)
    assert adapt(body, upstream("vllm"), None, True).body["guided_json"] == {"type": "object"}
    # Set to nothing, such a field asks for nothing: removed without a refusal or a mark.
    quiet = {"model": "x", "messages": HI, "ignore_eos": False, "stop_token_ids": [], "top_k": None}
    removed = adapt(quiet, upstream("openai"), None, True)
    assert removed.stripped == () and set(removed.body) == {"model", "messages"}
    with pytest.raises(Unfit, match="one choice"):
        adapt({"model": "x", "messages": HI, "n": 2}, upstream("llamacpp"), None, True)


def test_local_engines_of_a_profiled_route_get_every_sampling_parameter() -> None:
    body = {"model": "x", "messages": HI, "temperature": 0.2, "top_p": 0.9}
    for kind in ("vllm", "llamacpp"):
        out = adapt(body, upstream(kind), None, complete=True).body
        assert {k: out[k] for k in NEUTRAL} == {**NEUTRAL, "temperature": 0.2, "top_p": 0.9}
    # An API provider is not told more than the client and the profile said.
    assert "top_k" not in adapt(body, upstream("openai"), None, True).body
    # A client's top_k=-1 ("off" on vLLM) is llama.cpp's 0; its repeat_penalty is read.
    out = adapt({**body, "top_k": -1, "repeat_penalty": 1.3}, upstream("llamacpp"), None, True)
    assert out.body["top_k"] == 0 and out.body["repetition_penalty"] == 1.3


def test_the_hash_is_of_what_was_sent() -> None:
    body = {"model": "x", "messages": HI, "temperature": 0.2, "top_p": 0.9}
    vllm, llama = (adapt(body, upstream(k), None, True).params_hash for k in ("vllm", "llamacpp"))
    assert vllm == llama  # both sample by the same written-out rule
    # Left to each engine's own defaults, the sets are not the same, and neither are the hashes.
    vllm, llama = (adapt(body, upstream(k), None, False).params_hash for k in ("vllm", "llamacpp"))
    assert vllm != llama


@pytest.mark.parametrize("kind", ["vllm", "llamacpp", "openai"])
@pytest.mark.parametrize("complete", [True, False])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"temperature": 0.2, "top_p": 0.9, "top_k": -1, "seed": 7, "stop": "x"},
        {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1},
        {"repeat_penalty": 1.3},
        {"repeat_penalty": 1.3, "repetition_penalty": "odd"},
        {"chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 9},
        {"reasoning_effort": "low", "n": 1, "logit_bias": {"1": 2}},
    ],
)
def test_the_clients_hash_from_an_attempts_meaning_is_the_clients(
    kind: str, complete: bool, extra: dict[str, Any]
) -> None:
    """Dispatch takes the client's hash from an attempt's meaning (the record need not read
    the body again): it is `params_hash` of the body, wherever it is given."""
    body = {"model": "x", "messages": HI, **extra}
    out = adapt(body, upstream(kind), None, complete)
    asked = out.asked_hash(body)
    assert asked == (None if "repeat_penalty" in body else params_hash(body, complete))
    if complete and not extra:  # a profiled route's plain request: one hash for both
        assert asked == out.params_hash


def test_the_hash_is_of_the_meaning_in_any_order_and_either_name() -> None:
    """What the hash is made of: the request's meaning (every set field, a cap under either
    name, a lone stop string as a list), whatever the order; the dialect only while a sampler is
    left to the engine's own defaults."""
    body = {"prompt": "x", "stop": "\n", "temperature": 0.5, "top_p": None, "user": "u"}
    body["max_completion_tokens"] = 9
    meaning = {"stop": ["\n"], "temperature": 0.5, "max_tokens": 9}
    assert Semantics.of(body, profiled=False).canonical() == meaning
    dump = orjson.dumps(meaning, option=orjson.OPT_SORT_KEYS)
    assert params_hash(body) == hashlib.sha256(dump).hexdigest()[:16]
    assert params_hash(dict(reversed(body.items()))) == params_hash(body)
    said_otherwise = {"prompt": "y", "stop": ["\n"], "temperature": 0.5, "max_tokens": 9}
    assert params_hash(said_otherwise) == params_hash(body)
    left = Semantics.of(body, profiled=False)
    assert left.digest("vllm") != left.digest("llamacpp")
    full = Semantics.of({**body, **NEUTRAL}, profiled=False)
    assert full.digest("vllm") == full.digest("llamacpp") == full.digest()


def test_a_body_without_extension_fields_still_has_n_checked() -> None:
    body = {"messages": HI, "n": 2}
    assert adapt(body, upstream("vllm"), None, False).body == body
    with pytest.raises(Unfit) as refused:
        adapt(body, upstream("llamacpp"), None, False)
    assert refused.value.param == "n"


def test_text_is_counted_by_its_utf8_bytes() -> None:
    """ASCII text is counted without encoding it; other text by its encoded bytes, as before."""
    for text in ("plain words " * 50, "naïve café " * 50, "日本語のテキスト" * 40, "emoji 🙂" * 30):
        size = len(text.encode())
        bounds = (size // 6, -(-size // 3))
        assert prompt_bounds({"prompt": text}) == bounds
        assert prompt_bounds({"prompt": [text, "x"]}) == bounds
        chat = prompt_bounds({"messages": [{"role": "user", "content": text}]})
        parts = [{"type": "text", "text": text}]
        assert chat == (bounds[0] + 4, bounds[1] + 4)
        assert prompt_bounds({"messages": [{"role": "user", "content": parts}]}) == chat


def test_a_cap_that_cannot_fit_is_clamped_and_marked() -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "a" * 300}], "max_tokens": 5000}
    low, high = prompt_bounds(body)
    assert (low, high) == (300 // 6 + 4, 100 + 4)
    out = adapt(body, upstream("vllm"), 1024, True)
    assert out.body["max_tokens"] == 1024 - high
    assert out.clamped == f"max_tokens=5000->{1024 - high}"
    # A cap that fits is left alone; so is a request without one (the gateway adds none).
    assert adapt({**body, "max_tokens": 100}, upstream("vllm"), 1024, True).clamped is None
    bare = {k: v for k, v in body.items() if k != "max_tokens"}
    assert "max_tokens" not in adapt(bare, upstream("vllm"), 1024, True).body
    both = {**body, "max_completion_tokens": 4000}
    assert adapt(both, upstream("vllm"), 1024, True).clamped == (
        f"max_tokens=5000->{1024 - high},max_completion_tokens=4000->{1024 - high}"
    )


def test_a_prompt_certainly_over_the_window_is_refused() -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "word " * 2000}]}
    with pytest.raises(ContextExceeded, match=r"prompt is too long: 1670 tokens > 1024 maximum"):
        adapt(body, upstream("vllm"), 1024, True)
    # Token ids are counted exactly.
    ids = {"model": "x", "prompt": list(range(1024))}
    with pytest.raises(ContextExceeded):
        adapt(ids, upstream("vllm"), 1024, True)
    assert prompt_bounds({"prompt": [[1, 2], [1, 2, 3]]}) == (3, 3)


def test_the_window_check_reads_the_bounds_dispatch_counted() -> None:
    """Dispatch counts a prompt once (`Call.bounds`); adapt's window check reads that count."""
    body = {"model": "x", "messages": HI, "max_tokens": 500}
    assert adapt(body, upstream("vllm"), 1024, True).clamped is None
    counted = adapt(body, upstream("vllm"), 1024, True, prompt_bounds(body))
    assert counted.body == adapt(body, upstream("vllm"), 1024, True).body
    assert adapt(body, upstream("vllm"), 1024, True, (10, 900)).clamped == "max_tokens=500->124"
    with pytest.raises(ContextExceeded, match="1024 tokens > 1024 maximum"):
        adapt(body, upstream("vllm"), 1024, True, (1024, 2048))


def test_the_tokenizers_count_decides_over_the_bytes_floor() -> None:
    """A template need not render what the bytes count (SmolLM2's renders no tools): where the
    upstream's tokenizer counted the prompt, that count refuses or clamps, not the floor."""
    body = {"model": "x", "messages": HI, "max_tokens": 500}
    floor_over = (1500, 3000)  # the bytes: at least 1,500 tokens, over a 1,024 window
    fits = adapt(body, upstream("vllm"), 1024, True, floor_over, counted=600)
    assert fits.clamped == "max_tokens=500->424"  # the room the count leaves
    with pytest.raises(ContextExceeded, match=r"1024 tokens > 1024 maximum .* by its tokenizer"):
        adapt(body, upstream("vllm"), 1024, True, (10, 20), counted=1024)
    with pytest.raises(ContextExceeded, match="by the gateway's count"):
        adapt(body, upstream("vllm"), 1024, True, floor_over)  # no count: the floor stands


def test_each_strip_is_logged_once_per_upstream_and_field(caplog: pytest.LogCaptureFixture) -> None:
    body = {"model": "x", "messages": HI, "min_tokens": 3}
    quiet = upstream("openai", headers={"x-once": "1"})
    with caplog.at_level(logging.WARNING, logger="gateway.serving.adapt"):
        for _ in range(3):
            adapt(body, quiet.model_copy(update={"name": "log-once"}), None, True)
    assert len([r for r in caplog.records if "'min_tokens'" in r.getMessage()]) == 1


# ---- through the gateway -------------------------------------------------------------------


def test_llamacpp_gets_its_own_names_and_the_full_sampling_set(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    """Two default arms once hashed alike while llama.cpp sampled with its own top_k=40,
    min_p=0.05, repeat_penalty=1.1; and max_completion_tokens and json_schema are adapted."""
    cfg = config(
        {"name": "v", "kind": "vllm", "base_url": fake.base_url},
        {"name": "l", "kind": "llamacpp", "base_url": fake2.base_url},
        models={
            "smol": {"profile": "smollm2", "upstreams": ["v"]},
            "smol-llamacpp": {"profile": "smollm2", "upstreams": ["l"]},
        },
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with running_gateway(cfg) as url:
        c = client(url)
        hashes = [
            c.chat.completions.with_raw_response.create(
                model=m, messages=HI, max_completion_tokens=9, response_format=fmt
            ).headers["x-plumbline-params-hash"]
            for m in ("smol", "smol-llamacpp")
        ]
    (vllm,), (llama,) = sent(fake), sent(fake2)
    sampling = {"temperature": 0.2, "top_p": 0.9, "top_k": 0, "min_p": 0.0}
    sampling |= {"presence_penalty": 0.0, "frequency_penalty": 0.0}
    assert {k: vllm[k] for k in sampling} == {k: llama[k] for k in sampling} == sampling
    assert vllm["repetition_penalty"] == llama["repeat_penalty"] == 1.0
    assert "repetition_penalty" not in llama
    assert vllm["max_completion_tokens"] == 9 and "max_tokens" not in vllm
    assert llama["max_tokens"] == 9 and "max_completion_tokens" not in llama
    assert vllm["response_format"] == fmt
    assert llama["response_format"] == {"type": "json_object", "schema": schema}
    assert hashes[0] == hashes[1]


def test_an_api_upstream_is_not_sent_vllm_only_fields(fake: FakeHandle) -> None:
    """A direct `openai` upstream was once sent top_k and friends and said nothing."""
    cfg = config(
        {"name": "api", "kind": "openai", "base_url": fake.base_url},
        models={"q": {"profile": "qwen3-instruct", "upstreams": ["api"]}},
    )
    sink = ListSink()
    with running_gateway(cfg, sinks=[sink]) as url:
        raw = client(url).chat.completions.with_raw_response.create(
            model="q", messages=HI, extra_body={"repetition_penalty": 1.1}
        )
    (body,) = sent(fake)
    assert body["temperature"] == 0.7 and body["top_p"] == 0.8
    assert not {"top_k", "min_p", "repetition_penalty", "chat_template_kwargs"} & set(body)
    marked = "top_k,min_p,repetition_penalty,chat_template_kwargs"
    assert raw.headers["x-plumbline-dropped"] == marked
    assert sink.records[0].dropped == marked


def test_guided_decoding_routes_past_an_upstream_that_cannot(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    cfg = config(
        {"name": "api", "kind": "openai", "base_url": fake.base_url},
        {"name": "v", "kind": "vllm", "base_url": fake2.base_url},
        models={"m": {"upstreams": ["api"], "fallback": ["v"]}, "only-api": {"upstreams": ["api"]}},
    )
    guided = {"guided_choice": ["yes", "no"]}
    with running_gateway(cfg) as url:
        c = client(url)
        raw = c.chat.completions.with_raw_response.create(model="m", messages=HI, extra_body=guided)
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="only-api", messages=HI, extra_body=guided)
    assert raw.headers["x-plumbline-upstream"] == "v" and sent(fake2)[0]["guided_choice"]
    assert sent(fake) == []  # never sent where it would have been ignored
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_parameter"
    assert error["param"] == "guided_choice" and "'api'" in error["message"]


def test_max_tokens_is_clamped_to_the_served_window(fake: FakeHandle) -> None:
    """Claude Code sends max_tokens=32000; vLLM answers a 400 where it cannot fit."""
    cfg = config({"name": "v", "kind": "vllm", "base_url": fake.base_url, "context_window": 2048})
    sink = ListSink()
    with running_gateway(cfg, sinks=[sink]) as url:
        raw = client(url).chat.completions.with_raw_response.create(
            model="smol", messages=HI, max_tokens=32000
        )
        metrics = httpx.get(url.removesuffix("/v1") + "/metrics").text
    room = 2048 - prompt_bounds({"messages": HI})[1]
    assert sent(fake)[0]["max_tokens"] == room
    assert raw.headers["x-plumbline-clamped"] == f"max_tokens=32000->{room}"
    assert sink.records[0].clamped == f"max_tokens=32000->{room}"
    assert sink.records[0].max_tokens == 32000  # the client's cap, as asked
    labels = 'field="max_tokens",lane="client",model="smol",upstream="v"'
    assert f"gateway_clamped_total{{{labels}}} 1.0" in metrics


def test_a_prompt_over_the_window_is_a_400_naming_the_sizes(
    fake: FakeHandle, fake2: FakeHandle
) -> None:
    long = [{"role": "user", "content": "word " * 4000}]  # at least 3337 tokens by any count
    cfg = config(
        {"name": "small", "kind": "vllm", "base_url": fake.base_url, "context_window": 2048},
        {"name": "big", "kind": "vllm", "base_url": fake2.base_url, "context_window": 32768},
        models={
            "smol": {"upstreams": ["small"]},
            "wide": {"upstreams": ["small"], "fallback": ["big"]},
        },
    )
    with running_gateway(cfg) as url:
        c = client(url)
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="smol", messages=long)
        raw = c.chat.completions.with_raw_response.create(model="wide", messages=long)
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert "prompt is too long: 3337 tokens > 2048 maximum" in error["message"]
    assert sent(fake) == []
    assert raw.headers["x-plumbline-upstream"] == "big"  # the candidate whose window it fits


def test_the_messages_door_is_clamped_too(fake: FakeHandle) -> None:
    cfg = config({"name": "v", "kind": "vllm", "base_url": fake.base_url, "context_window": 4096})
    with running_gateway(cfg) as url:
        claude = anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key="unused", timeout=30, max_retries=0
        )
        claude.messages.create(model="smol", max_tokens=32000, messages=HI)
    assert sent(fake)[0]["max_tokens"] < 4096


# ---- the written policy ----------------------------------------------------------------------


def test_the_docs_show_the_tables_in_the_code() -> None:
    section = (Path(__file__).resolve().parents[3] / "docs" / "doors" / "openai.md").read_text()
    for table in (markdown(CHAT_POLICY), markdown(COMPLETIONS_POLICY), capability_markdown()):
        assert table in section


def test_every_field_the_doors_validate_has_a_row() -> None:
    for request, policy in ((ChatRequest, CHAT_POLICY), (CompletionRequest, COMPLETIONS_POLICY)):
        assert set(request.model_fields) <= set(policy), request.__name__


def test_the_window_a_vllm_server_says_it_serves_is_learnt_and_clamped_to() -> None:
    """A vLLM upstream the gateway did not launch, with no window in the config: its /tokenize
    says max_model_len, which the health prober learns with the engine's fingerprint."""
    with running_fake(max_model_len=3000) as fake:
        cfg = config_from(
            {
                "server": {"health_interval_s": 0.05, "retry_backoff_s": 0},
                "upstreams": [
                    {"name": "v", "kind": "vllm", "base_url": fake.base_url, "model": "m"}
                ],
                "models": {"smol": {"upstreams": ["v"]}},
            }
        )
        with running_gateway(cfg) as url:
            root = url.removesuffix("/v1")
            wait_for(lambda: httpx.get(root + "/health").json()["upstreams"]["v"]["engine"])
            c = client(url)
            entry = c.models.retrieve("smol").model_dump()
            raw = c.chat.completions.with_raw_response.create(
                model="smol", messages=HI, max_tokens=32000
            )
        asked = sent(fake)[0]["max_tokens"]
    room = 3000 - prompt_bounds({"messages": HI})[1]
    assert entry["context_window"] == 3000
    assert raw.headers["x-plumbline-clamped"] == f"max_tokens=32000->{room}"
    assert asked == room
