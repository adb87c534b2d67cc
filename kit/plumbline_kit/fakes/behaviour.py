"""The fake upstream's behaviours (`plumbline_kit/fakes/upstream.py`): what a request is answered
with, and the checks a behaviour object must pass.

Behaviour: a JSON object; the effective one for a request is the server defaults, overlaid by
``POST /_fake/default``, overlaid by the next entry of the script (``null`` removes a key).
Keys (unknown keys are rejected):

==========================  =================================================================
status, message             reply with this HTTP status and an OpenAI error envelope
retry_after                 ``Retry-After`` header on that error (seconds, or a string sent
                            as is: an HTTP date)
body                        send this raw body instead (any status; ``"not json"`` etc.)
drop_connection             close the socket without any response
hang_before_first_byte      sleep this many seconds before the response headers
hang_after_chunks, hang     after N stream chunks, sleep ``hang`` seconds (default 30), then
                            go on; 0 = headers sent, no body yet
disconnect_after_chunks     after N stream chunks, close the connection mid-stream
                            (a chunk is one SSE event; chat's first one is the role chunk)
malformed_sse               a stream contains a block that is not valid SSE framing
invalid_json                a stream event (or a non-stream body) is truncated JSON
tokens                      answer length in tokens (default 16)
text                        answer text instead of ``tok0 tok1 ...``
degenerate                  answer is ``111 222 333 444 111 ...``
realistic                   answer is ``tokens`` pieces of a realistic passage (non-ASCII,
                            quotes, backslashes, line breaks: `plumbline_kit/fakes/text.py`)
pace_tps                    per-token pacing, tokens per second (a non-stream answer waits
                            for all its tokens)
leak_think                  ``true``: content is ``<think>...</think>answer`` (no reasoning
                            parser); ``"close_only"``: only ``...</think>answer`` (Qwen3)
reasoning_field             ``"reasoning"`` | ``"reasoning_content"`` | ``"both"``: reasoning
                            in a separate field, counted in ``reasoning_tokens``
reasoning_tokens            length of the reasoning (default 8)
no_usage                    never send usage (like llama.cpp)
cached_tokens               ``usage.prompt_tokens_details.cached_tokens`` (not clamped)
cost, provider              OpenRouter-style ``usage.cost`` and top-level ``provider``
ignore_params               parameter names recorded as ignored when present
tool_call                   ``{"name", "arguments"}`` (arguments: object or raw string) or
                            ``true`` (first offered tool); also used for ``tool_choice``
                            ``"required"`` or a named function
finish_reason               report this finish reason instead
==========================  =================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DEFAULT_HANG = 30.0


class BehaviourError(ValueError):
    """A behaviour object that names an unknown key or has a value of the wrong type."""


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "status": lambda v: isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599,
    "message": lambda v: isinstance(v, str),
    "retry_after": lambda v: _num(v) or isinstance(v, str),  # seconds, or an HTTP date
    "body": lambda v: isinstance(v, str),
    "drop_connection": lambda v: isinstance(v, bool),
    "hang_before_first_byte": _num,
    "hang_after_chunks": _count,
    "hang": _num,
    "disconnect_after_chunks": _count,
    "malformed_sse": lambda v: isinstance(v, bool),
    "invalid_json": lambda v: isinstance(v, bool),
    "tokens": _count,
    "text": lambda v: isinstance(v, str),
    "degenerate": lambda v: isinstance(v, bool),
    "realistic": lambda v: isinstance(v, bool),
    "pace_tps": lambda v: _num(v) and v > 0,
    "leak_think": lambda v: isinstance(v, bool) or v == "close_only",
    "reasoning_field": lambda v: v in ("reasoning", "reasoning_content", "both"),
    "reasoning_tokens": _count,
    "no_usage": lambda v: isinstance(v, bool),
    "cached_tokens": _count,
    "cost": _num,
    "provider": lambda v: isinstance(v, str),
    "ignore_params": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "tool_call": lambda v: (
        isinstance(v, bool)
        or (
            isinstance(v, dict)
            and isinstance(v.get("name"), str)
            and set(v) <= {"name", "arguments"}
        )
    ),
    "finish_reason": lambda v: isinstance(v, str),
    "harness": lambda v: (
        isinstance(v, bool)
        or (
            isinstance(v, list)
            and all(
                isinstance(c, dict)
                and isinstance(c.get("name"), str)
                and set(c) <= {"name", "arguments"}
                for c in v
            )
        )
    ),
}
BEHAVIOUR_KEYS = frozenset(_CHECKS)


def validate_behaviour(obj: Any) -> dict[str, Any]:
    """Return ``obj`` as a behaviour dict, or raise ``BehaviourError`` naming what is wrong."""
    if not isinstance(obj, dict):
        raise BehaviourError(f"a behaviour must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - BEHAVIOUR_KEYS)
    if unknown:
        raise BehaviourError(f"unknown behaviour keys {unknown}; known: {sorted(BEHAVIOUR_KEYS)}")
    for key, value in obj.items():
        if value is not None and not _CHECKS[key](value):
            raise BehaviourError(f"behaviour key {key!r} has an invalid value {value!r}")
    return dict(obj)


def overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``top``; a ``None`` in ``top`` removes the key."""
    merged = {**base, **top}
    return {k: v for k, v in merged.items() if v is not None}
