"""Applying a model's profile to a request, once, before routing.

The client's own values always win; the profile fills in what the client left unset. At
dispatch (gateway/serving/adapt.py) a local engine of a profiled route then gets every sampling
parameter explicitly: what neither client nor profile set is written out as `NEUTRAL` (vLLM's
own neutral values), so llama.cpp does not sample with its top_k=40, min_p=0.05,
repeat_penalty=1.1 and vLLM does not take the checkpoint's generation_config. The hash is made
over what the chosen upstream is sent, so two arms are only ever compared when they were sampled
the same way; a set left partly to an engine's defaults hashes with that engine's kind.

The gateway never adds a `max_tokens`: a silent cap is how a plausible wrong number is made.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gateway.config import Profile

# The sampling fields a profile may fill in.
SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
)
# Parameters that change what the model generates, and so belong in the hash.
HASHED = (
    *SAMPLING,
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "n",
    "chat_template_kwargs",
    "reasoning_effort",
    "thinking_token_budget",
    "response_format",
    "logit_bias",
)


# What each sampling parameter means when unset, written out: vLLM's defaults for a request that
# names none (vllm/entrypoints/openai/chat_completion/protocol.py, _DEFAULT_SAMPLING_PARAMS),
# each of which switches its sampler off; top_k 0 is "off" on vLLM and llama.cpp alike.
NEUTRAL: dict[str, float | int] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
}


_HASHED = frozenset(HASHED)
_NEUTRAL = frozenset(NEUTRAL)


def apply_profile(body: dict[str, Any], profile: Profile | None, chat: bool) -> dict[str, Any]:
    """Fill unset sampling fields from the profile (in place) and return the body."""
    if profile is None:
        return body
    for key, value in _sampling_of(profile):
        if body.get(key) is None:
            body[key] = value
    if chat:
        if profile.chat_template_kwargs:
            merged = dict(profile.chat_template_kwargs)
            client = body.get("chat_template_kwargs")
            if isinstance(client, dict):
                merged.update(client)
            body["chat_template_kwargs"] = merged
        if profile.reasoning_effort and body.get("reasoning_effort") is None:
            body["reasoning_effort"] = profile.reasoning_effort
    return body


_SAMPLING: dict[int, tuple[Any, tuple[tuple[str, Any], ...]]] = {}


def _sampling_of(profile: Profile) -> tuple[tuple[str, Any], ...]:
    """The profile's set sampling fields, dumped once per (frozen) sampling object rather than
    on every request; the object is kept beside its dump, so its id is never another's."""
    sampling = profile.sampling
    cached = _SAMPLING.get(id(sampling))
    if cached is None or cached[0] is not sampling:
        if len(_SAMPLING) >= 256:  # reloaded configs bring new objects: stay bounded
            _SAMPLING.clear()
        dumped = tuple(sampling.model_dump(exclude_none=True).items())
        cached = _SAMPLING[id(sampling)] = (sampling, dumped)
    return cached[1]


def params_hash(body: dict[str, Any], defaults: str | None = None) -> str:
    """Short, stable hash of the effective sampling parameters. `defaults`: the kind of engine
    whose own defaults decide what the body leaves unset; it is hashed with a set that does not
    name every `NEUTRAL` parameter, since engines differ there."""
    # Over the body's own fields (a handful) rather than every hashed name; the sorted dump
    # does not depend on the order.
    effective = {k: v for k, v in body.items() if v is not None and k in _HASHED}
    if defaults is not None and not _NEUTRAL.issubset(effective):
        effective["engine_defaults"] = defaults
    digest = hashlib.sha256(orjson.dumps(effective, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()[:16]
