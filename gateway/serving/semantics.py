"""What a request asks of the model, apart from the prompt: its meaning, defined once.

A front door's body, after the route's profile is applied (gateway/serving/profile.py), says how
to sample (temperature … repetition_penalty, seed), whether to think and for how long (the
template's thinking switch, `reasoning_effort`, a thinking budget), where to stop, in which
format to answer, how much to write and how many choices. `Semantics.of` reads that into one
typed value; each upstream's dialect then has to carry it (gateway/serving/dialect.py), and the
params hash is made over it, not over the bytes sent: a vLLM node told
`chat_template_kwargs.enable_thinking = false` and OpenRouter told `reasoning.enabled = false`
were asked the same thing and hash the same.

What a route leaves unset is the neutral value (`NEUTRAL`: every sampler off, vLLM's and
OpenRouter's documented defaults alike), so an unset `top_k` and `top_k = 0` mean one thing.
Without a profile a body that leaves a sampler unset is sampled by each engine's own defaults,
which differ: the hash then names the dialect (`digest(defaults=...)`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

# The samplers, in the order they are shown.
SAMPLERS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
# What each sampler means when unset, written out: vLLM's defaults for a request that names none
# (vllm/entrypoints/openai/protocol.py, _DEFAULT_SAMPLING_PARAMS) and OpenRouter's documented
# ones (openrouter.ai/docs/api-reference/parameters), each of which switches its sampler off;
# top_k 0 is "off" on vLLM, llama.cpp and OpenRouter alike.
NEUTRAL: dict[str, float | int] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
}
# The chat-template switches that turn thinking on and off (Qwen3, GLM, Nemotron, Gemma say
# `enable_thinking`; DeepSeek V3.1 says `thinking`).
THINKING_KEYS = ("enable_thinking", "thinking")
# Body fields the meaning is read from (a body naming none of them asks for nothing special).
READ = frozenset(
    {
        *SAMPLERS,
        "repeat_penalty",
        "seed",
        "stop",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "response_format",
        "logit_bias",
        "chat_template_kwargs",
        "reasoning_effort",
        "thinking_token_budget",
        "reasoning",
    }
)


_NUMBERS = (int, float)
_THOUGHT = frozenset(
    {"chat_template_kwargs", "reasoning_effort", "thinking_token_budget", "reasoning"}
)


@dataclass(slots=True)
class Semantics:
    """The effective meaning of one request, made by `of` and read, never changed, after (not
    frozen: a frozen dataclass's construction costs a call per field, on every attempt).
    Samplers are None only where the route has no profile and the body left them to the engine
    (`defaults`)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    # The template's thinking switch (None: the template's own default) and the key it is said
    # with (`THINKING_KEYS`; not part of the meaning).
    thinking: bool | None = None
    thinking_key: str = "enable_thinking"
    thinking_budget: int | None = None  # tokens of thinking at most (None: no cap)
    reasoning_effort: str | None = None
    # Other chat-template variables, as (key, value) pairs sorted by key.
    template: tuple[tuple[str, Any], ...] = ()
    stop: tuple[str, ...] = ()
    response_format: Any = None
    max_tokens: int | None = None  # the output cap, whichever name the client used
    n: int = 1
    logit_bias: Any = None
    # Some sampler was left to the engine's own defaults (no profile, and the body left it).
    defaults: bool = False

    @classmethod
    def of(cls, body: Mapping[str, Any], profiled: bool) -> Semantics:
        """The meaning of `body` (a chat or completions body, the profile already applied).
        `profiled`: the route has a profile, so an unset sampler is the neutral one."""
        get = body.get
        samplers: dict[str, Any] = {}
        defaults = False
        for name in SAMPLERS:
            value = get(name)
            if value.__class__ not in _NUMBERS:  # None, or not a number (bool is not)
                value = get("repeat_penalty") if name == "repetition_penalty" else None
                if value.__class__ not in _NUMBERS:
                    value = NEUTRAL[name] if profiled else None
                    defaults = defaults or not profiled
            elif name == "top_k" and value < 0:
                value = 0  # -1 and 0 both mean "off"
            samplers[name] = value
        thinking, key, budget, effort, template = _thinking(body)
        stop = body.get("stop")
        cap = body.get("max_completion_tokens")
        cap = cap if cap is not None else body.get("max_tokens")
        n = body.get("n")
        return cls(
            **samplers,
            seed=seed if (seed := get("seed")).__class__ is int else None,
            thinking=thinking,
            thinking_key=key,
            thinking_budget=budget,
            reasoning_effort=effort,
            template=template,
            stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            response_format=body.get("response_format") or None,
            max_tokens=cap if isinstance(cap, int) else None,
            n=n if isinstance(n, int) and n > 1 else 1,
            logit_bias=body.get("logit_bias") or None,
            defaults=defaults,
        )

    def canonical(self) -> dict[str, Any]:
        """The meaning as a plain dict of what is set (the hash is made over it)."""
        out: dict[str, Any] = {}
        for name in SAMPLERS:
            value = getattr(self, name)
            if value is not None:
                out[name] = int(value) if name == "top_k" else float(value)
        for name in ("seed", "thinking", "thinking_budget", "reasoning_effort", "max_tokens"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        if self.template:
            out["template"] = dict(self.template)
        if self.stop:
            out["stop"] = list(self.stop)
        if self.response_format is not None:
            out["response_format"] = self.response_format
        if self.n != 1:
            out["n"] = self.n
        if self.logit_bias is not None:
            out["logit_bias"] = self.logit_bias
        return out

    def digest(
        self,
        defaults: str | None = None,
        unsent: Iterable[str] = (),
        accepted: Iterable[str] = (),
    ) -> str:
        """Short, stable hash of the meaning. `defaults`: the dialect whose engine fills what
        `defaults` left unset (hashed only then); `unsent`: the meaning's keys the upstream could
        not be told (so an arm that was not told top_k=20 never hashes like one that was);
        `accepted`: keys the route's operator accepts as unequal, left out of the hash of every
        arm of the route."""
        meaning = self.canonical()
        dropped = set(accepted)
        for key in dropped:
            meaning.pop(key, None)
        missing = sorted(set(unsent) - dropped)
        if missing:
            meaning["unsent"] = missing
        if self.defaults and defaults is not None:
            meaning["engine_defaults"] = defaults
        dump = orjson.dumps(meaning, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return hashlib.sha256(dump).hexdigest()[:16]

    def describe(self) -> str:
        """The meaning as a person reads it: `temperature=0.7, top_k=20, enable_thinking=false`
        (a response format by its type, a logit bias by its size: the hash holds them whole)."""
        parts = []
        for key, value in self.canonical().items():
            if key == "template":
                parts += [f"{shown(k)}={shown(v)}" for k, v in value.items()]
            elif key == "thinking":
                parts.append(f"{self.thinking_key}={shown(value)}")
            elif key == "thinking_budget":
                parts.append(f"thinking_token_budget={value}")
            elif key == "response_format":
                kind = value.get("type") if isinstance(value, dict) else None
                parts.append(f"response_format={shown(kind or value)}")
            elif key == "logit_bias":
                parts.append(f"logit_bias={len(value) if isinstance(value, dict) else 1} tokens")
            else:
                parts.append(f"{key}={shown(value)}")
        return ", ".join(parts)


def shown(value: Any) -> str:
    """A value as the gateway's messages and headers write it (ASCII, one line): numbers without a
    trailing `.0`, plain words as they are, anything else as JSON."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isprintable() and value:
        return value
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def _thinking(
    body: Mapping[str, Any],
) -> tuple[bool | None, str, int | None, str | None, tuple[tuple[str, Any], ...]]:
    """(thinking switch, its key, budget, effort, other template variables) of a body, read from
    vLLM's names (`chat_template_kwargs`, `thinking_token_budget`, `reasoning_effort`) and a
    client's own OpenRouter `reasoning` object."""
    if _THOUGHT.isdisjoint(body):
        return None, "enable_thinking", None, None, ()
    kwargs = body.get("chat_template_kwargs")
    kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
    thinking: bool | None = None
    key = "enable_thinking"
    for name in THINKING_KEYS:
        if name in kwargs:
            value = kwargs.pop(name)
            if value is not None:
                thinking, key = bool(value), name
    said = kwargs.pop("reasoning_effort", None)  # llama.cpp's gpt-oss template reads it there
    effort = body.get("reasoning_effort")
    effort = effort if isinstance(effort, str) else said if isinstance(said, str) else None
    budget = body.get("thinking_token_budget")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict):
        if thinking is None and isinstance(reasoning.get("enabled"), bool):
            thinking = reasoning["enabled"]
        if effort is None and isinstance(reasoning.get("effort"), str):
            effort = reasoning["effort"]
        if budget is None:
            budget = reasoning.get("max_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        budget = None  # vLLM's -1 is "unlimited": no cap
    template = tuple(sorted((k, v) for k, v in kwargs.items() if v is not None))
    return thinking, key, budget, effort, template
