"""Anthropic's error shape: what the Messages door answers for any gateway error.

The type Anthropic names for each status, its own status for "overloaded", and an upstream's
context overflow in the wording Claude Code recognises. The edge's one renderer
(`gateway/edge/render.py`) uses it for every error on the Messages door's paths.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.errors import GatewayError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
# Anthropic says "overloaded" with its own status.
STATUSES = {503: 529}

# An engine's context overflow, as vLLM words it (several versions) and llama.cpp.
_WINDOW = re.compile(
    r"maximum (?:context length|model length)(?: is| of)?\s*\(?(\d+)|context size \((\d+)|"
    r"context window of (\d+)"
)
_PROMPT = re.compile(
    r"\((\d+) in the messages|has (\d+) input tokens|prompt \(length (\d+)\)|"
    r"[Ii]nput length \((\d+)\)|request \((\d+) tokens\)|Requested tokens \((\d+)\)"
)


def overflow(message: str) -> str | None:
    """`prompt is too long: N tokens > M maximum` for an upstream's context overflow whose
    prompt alone is over the window (a max_tokens that does not fit keeps its own wording)."""
    window = _WINDOW.search(message)
    if window is None:
        return None
    limit = int(next(g for g in window.groups() if g))
    prompt = _PROMPT.search(message)
    if prompt is None:
        return f"prompt is too long: {message}" if "exceed" in message else None
    n = int(next(g for g in prompt.groups() if g))
    return f"prompt is too long: {n} tokens > {limit} maximum" if n > limit else None


def error_body(error: GatewayError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(error.status, "api_error")
    message = error.message
    if error.status == 400 and (too_long := overflow(message)) is not None:
        message = too_long
    return {"type": "error", "error": {"type": kind, "message": message}}


def rendered(error: GatewayError) -> tuple[int, bytes]:
    """(the status, the body) of `error` in Anthropic's shape."""
    return STATUSES.get(error.status, error.status), orjson.dumps(error_body(error))
