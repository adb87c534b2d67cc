"""Applying a model's profile to a request, once, before routing.

The client's own values always win; the profile fills in what the client left unset, and every
sampling parameter is then sent explicitly, so no upstream falls back to its own defaults (vLLM's
generation_config, OpenRouter's T=1/top_k=0). The hash of the effective parameters goes on the
record, so two arms are only ever compared when they were sampled the same way.

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


def apply_profile(body: dict[str, Any], profile: Profile | None, chat: bool) -> dict[str, Any]:
    """Fill unset sampling fields from the profile (in place) and return the body."""
    if profile is None:
        return body
    for key, value in profile.sampling.model_dump(exclude_none=True).items():
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


def params_hash(body: dict[str, Any]) -> str:
    """Short, stable hash of the effective sampling parameters."""
    effective = {k: body[k] for k in HASHED if body.get(k) is not None}
    digest = hashlib.sha256(orjson.dumps(effective, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()[:16]
