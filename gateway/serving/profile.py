"""Applying a model's profile to a request, once, before routing.

The client's own values always win; the profile fills in what the client left unset. What the
body then says is the request's meaning (gateway/serving/semantics.py), which every upstream's
dialect must carry (gateway/serving/dialect.py) and which the params hash is made over. At
dispatch (gateway/serving/adapt.py) a local engine of a profiled route gets every sampling
parameter explicitly: what neither client nor profile set is written out as `NEUTRAL` (vLLM's
own neutral values), so llama.cpp does not sample with its top_k=40, min_p=0.05,
repeat_penalty=1.1 and vLLM does not take the checkpoint's generation_config.

The gateway never adds a `max_tokens`: a silent cap is how a plausible wrong number is made.
"""

from __future__ import annotations

from typing import Any

from gateway.config import Profile
from gateway.serving.semantics import NEUTRAL as NEUTRAL
from gateway.serving.semantics import SAMPLERS, Semantics

# The sampling fields a profile may fill in: the samplers, and the seed.
SAMPLING = (*SAMPLERS, "seed")


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


def params_hash(body: dict[str, Any], profiled: bool = False) -> str:
    """The hash of what `body` asks (`Semantics.digest`), before any upstream is chosen: the
    record keeps it where no attempt was answered (an answered one keeps its upstream's)."""
    return Semantics.of(body, profiled).digest()
