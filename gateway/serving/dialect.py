"""Saying a request's meaning in each upstream's dialect, and naming what one cannot be told.

`translate` writes a request's `Semantics` (gateway/serving/semantics.py) onto the body one
upstream is sent, in that upstream's words, and returns every part of the meaning it could not
carry as a `Gap`. A gap is not silent: the record, the answer's headers, the eval results, the
gate, the eval report, the console and `plumbline report health` name it as
`api-b cannot be sent top_k=20 (kind openai)`, and an arm with one is not at parity with an arm
without (its params hash differs) unless the route accepts that field (`accept_unequal`).

    meaning             vllm                   llamacpp                openrouter          openai
    samplers            as sent                as sent (repeat_pen.)   as sent             no top_k,
                                                                                   min_p, rep_pen
    thinking on/off     chat_template_kwargs   chat_template_kwargs    reasoning.enabled   -
    reasoning_effort    reasoning_effort       chat_template_kwargs    reasoning.effort    as sent
    thinking budget     thinking_token_budget  -                       reasoning.max_tokens -
    template variables  chat_template_kwargs   chat_template_kwargs    -                   -

llama.cpp: llama.cpp's own server takes `chat_template_kwargs` per request (an upstream that
does says so with `accepts = ["chat_template_kwargs"]`); llama-cpp-python's, which `plumbline up`
launches, takes them once, at launch (deploy/launch.py passes its profile's), so such an upstream
carries exactly its own profile's template variables and no others (`Carrier.fixed`).

OpenRouter ignores a parameter a provider does not serve unless `provider.require_parameters` is
true: it is sent true whenever the body sets a value a provider may ignore. An upstream whose
config says `require_parameters = false` has that named as a gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.serving.semantics import NEUTRAL, Semantics, shown

THINKING_BUDGET = "thinking_token_budget"
# Samplers only some dialects take (the others take temperature, top_p and the penalties).
EXTENDED = ("top_k", "min_p", "repetition_penalty")
# The body fields the thinking group is said with, removed and said again per dialect.
THINKING_FIELDS = ("chat_template_kwargs", "reasoning_effort", THINKING_BUDGET, "reasoning")
# Fields a provider behind OpenRouter may ignore unless `require_parameters` is true.
IGNORABLE = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "top_a",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "logit_bias",
        "response_format",
        "reasoning",
    }
)
# The key of `Semantics.canonical` each name of `accept_unequal` stands for.
KEY_OF = {
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "enable_thinking": "thinking",
    "thinking": "thinking",
    "reasoning_effort": "reasoning_effort",
    THINKING_BUDGET: "thinking_budget",
    "chat_template_kwargs": "template",
    "require_parameters": "require_parameters",
}


@dataclass(frozen=True, slots=True)
class Gap:
    """One part of a request's meaning an upstream could not be told."""

    upstream: str
    kind: str  # the dialect: vllm | llamacpp | openrouter | openai
    field: str  # as `accept_unequal` names it (a template variable: its own name)
    key: str  # the `Semantics.canonical` key it is part of
    value: Any
    note: str = ""

    def text(self) -> str:
        note = f": {self.note}" if self.note else ""
        return (
            f"{self.upstream} cannot be sent {shown(self.field)}={shown(self.value)} "
            f"(kind {self.kind}{note})"
        )

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True, slots=True)
class Carrier:
    """What one upstream can be told: its dialect, the extension fields it takes, how it is told
    a thinking budget (`Config.thinking_cap`), the template variables it was launched with where
    it takes none per request, and its configured `provider.require_parameters`."""

    upstream: str
    kind: str
    takes: frozenset[str]
    local: bool = False
    cap: str | None = None
    fixed: Mapping[str, Any] | None = None
    require: bool | None = None

    def gap(self, field: str, key: str, value: Any, note: str = "") -> Gap:
        return Gap(self.upstream, self.kind, field, key, value, note)


def translate(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> tuple[list[Gap], bool]:
    """Write `meaning` onto `out` (in place) as `carrier`'s upstream says it; return what it could
    not be told, and whether OpenRouter must be told `require_parameters`."""
    gaps: list[Gap] = []
    for name in EXTENDED:
        value = getattr(meaning, name)
        if value is None:
            continue
        if name not in carrier.takes:
            out.pop(name, None)
            if value != NEUTRAL[name]:
                gaps.append(carrier.gap(name, name, value))
        elif not carrier.local and value == NEUTRAL[name]:
            out.pop(name, None)  # "off" is a provider's default: asking for it narrows its choice
    for name in THINKING_FIELDS:
        out.pop(name, None)
    gaps += _SAY[carrier.kind](out, meaning, carrier)
    require = carrier.kind == "openrouter" and not IGNORABLE.isdisjoint(out)
    if require and carrier.require is False:
        note = "its config says provider.require_parameters = false, so a provider may ignore it"
        ignored = sorted(IGNORABLE & set(out))
        gaps.append(carrier.gap("require_parameters", "require_parameters", ignored, note))
    return gaps, require


def _kwargs(meaning: Semantics) -> dict[str, Any]:
    kwargs = dict(meaning.template)
    if meaning.thinking is not None:
        kwargs[meaning.thinking_key] = meaning.thinking
    return kwargs


def _budget(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> list[Gap]:
    budget = meaning.thinking_budget
    if budget is None:
        return []
    if carrier.cap == THINKING_BUDGET:
        out[THINKING_BUDGET] = budget
    elif carrier.cap == "reasoning.max_tokens":
        out["reasoning"] = {**out.get("reasoning", {}), "max_tokens": budget}
    else:
        return [carrier.gap(THINKING_BUDGET, "thinking_budget", budget)]
    return []


def _vllm(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> list[Gap]:
    gaps = _template(out, _kwargs(meaning), carrier)
    if meaning.reasoning_effort is not None:
        out["reasoning_effort"] = meaning.reasoning_effort
    return gaps + _budget(out, meaning, carrier)


def _llamacpp(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> list[Gap]:
    kwargs = _kwargs(meaning)
    if meaning.reasoning_effort is not None:  # the gpt-oss template reads it as a variable
        kwargs["reasoning_effort"] = meaning.reasoning_effort
    return _template(out, kwargs, carrier) + _budget(out, meaning, carrier)


def _template(out: dict[str, Any], kwargs: dict[str, Any], carrier: Carrier) -> list[Gap]:
    """Template variables: per request where taken, else what the upstream was launched with
    must be what is asked (`Carrier.fixed`)."""
    if "chat_template_kwargs" in carrier.takes:
        if kwargs:
            out["chat_template_kwargs"] = kwargs
        return []
    fixed = dict(carrier.fixed or {})
    gaps = []
    for name in sorted(set(kwargs) | set(fixed)):
        asked = kwargs.get(name)
        if asked == fixed.get(name):
            continue
        launched = f"launched with {name}={shown(fixed[name])}" if name in fixed else ""
        note = launched or "it takes template variables only at launch"
        gaps.append(carrier.gap(name, _key(name), asked, note))
    return gaps


def _key(name: str) -> str:
    if name in ("enable_thinking", "thinking"):
        return "thinking"
    return "reasoning_effort" if name == "reasoning_effort" else "template"


def _openrouter(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> list[Gap]:
    gaps = _budget(out, meaning, carrier)
    reasoning = dict(out.get("reasoning") or {})
    if meaning.thinking is not None:
        reasoning["enabled"] = meaning.thinking
    if meaning.reasoning_effort is not None:
        if "max_tokens" in reasoning:  # OpenRouter takes one of the two
            note = "OpenRouter takes an effort or a budget, not both; the budget is sent"
            effort = meaning.reasoning_effort
            gaps.append(carrier.gap("reasoning_effort", "reasoning_effort", effort, note))
        else:
            reasoning["effort"] = meaning.reasoning_effort
    if reasoning:
        out["reasoning"] = reasoning
    return gaps + _untemplated(meaning, carrier)


def _openai(out: dict[str, Any], meaning: Semantics, carrier: Carrier) -> list[Gap]:
    gaps = _budget(out, meaning, carrier)
    if meaning.thinking is not None:
        gaps.append(carrier.gap(meaning.thinking_key, "thinking", meaning.thinking))
    if meaning.reasoning_effort is not None:
        out["reasoning_effort"] = meaning.reasoning_effort
    return gaps + _untemplated(meaning, carrier)


def _untemplated(meaning: Semantics, carrier: Carrier) -> list[Gap]:
    """An API renders its own template: other template variables cannot be said."""
    return [carrier.gap(name, "template", value) for name, value in meaning.template]


_SAY = {"vllm": _vllm, "llamacpp": _llamacpp, "openrouter": _openrouter, "openai": _openai}


def accepted_keys(names: Any) -> frozenset[str]:
    """The `Semantics.canonical` keys a route's `accept_unequal` names."""
    return frozenset(KEY_OF[n] for n in names)
