"""Errors the gateway raises, each knowing its HTTP status and OpenAI error `type`.

    GatewayError
    ├── BadRequest            400 invalid_request_error   (malformed JSON, wrong types, bad values)
    │   └── BodyTooLarge      413 invalid_request_error
    ├── ConfigError           400 invalid_request_error   (a config file that fails to load)
    ├── HeadersTooLarge       431 invalid_request_error   (the access guard's header cap)
    ├── Unauthorized          401 authentication_error
    ├── Forbidden             403 permission_error        (a role or a model the key may not use)
    ├── Conflict              409 invalid_request_error   (admin: a key that exists, store keys off)
    ├── RateLimited           429 rate_limit_error        (a key's budget; carries Retry-After)
    ├── ModelNotFound         404 invalid_request_error   (code model_not_found)
    ├── UpstreamUnavailable   503 service_unavailable     (no candidate could be tried)
    └── AllUpstreamsFailed    502 upstream_error          (every attempt failed; keeps each cause)
        └── UpstreamTimeout   504 timeout_error

One handler renders them all as `{"error": {"message", "type", "param", "code"}}`. Messages say
what was wrong and never carry secrets, upstream bodies or tracebacks. `describe` is the one
place a pydantic validation failure (a request body, a config file) becomes such a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def json(self) -> bytes:
        return orjson.dumps(self.body())


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class BodyTooLarge(BadRequest):
    status = 413
    code = "request_too_large"


class ConfigError(GatewayError):
    """The config file is missing, not TOML, or fails validation; the message names the keys."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_config"


class HeadersTooLarge(GatewayError):
    status = 431
    type = "invalid_request_error"
    code = "request_headers_too_large"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"
    code = "forbidden"


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class UpstreamUnavailable(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "no_upstream_available"


class AllUpstreamsFailed(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_failed"

    def __init__(self, message: str, causes: list[str] | None = None):
        super().__init__(message)
        self.causes = causes or []


class UpstreamTimeout(AllUpstreamsFailed):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


def sse_error_event(error: GatewayError) -> bytes:
    """The event that ends a stream that broke after its first byte reached the client."""
    return b"data: " + error.json() + b"\n\ndata: [DONE]\n\n"


# ---- validation failures as messages ---------------------------------------------------------

Problem = Mapping[str, Any]  # one of pydantic's `ValidationError.errors()`


def _where(body: Any, loc: Sequence[Any]) -> str:
    """The location in the body: union branch labels (`str`, `list[…]`, a tag) left out."""
    parts: list[str] = []
    node = body
    tagged = None
    for i, p in enumerate(loc):
        if isinstance(p, str) and ("[" in p or p == "str"):
            continue
        if isinstance(node, dict) and node.get("type") == p and node is not tagged:
            tagged = node
            continue  # the tag of a discriminated union
        inside = isinstance(node, list) and isinstance(p, int) and p < len(node)
        if inside or (isinstance(node, dict) and p in node):
            node = node[p]
        elif i < len(loc) - 1:
            continue  # a tag naming the branch, not a place in the body
        else:
            node = None
        parts.append(str(p))
    return ".".join(parts)


def _one(where: str, problem: Problem) -> str:
    if problem["type"] == "missing":
        return f"'{where}' is required"
    return f"Invalid value for '{where}': {problem['msg']}" if where else str(problem["msg"])


def describe(
    problems: Sequence[Problem], body: Any = None, *, every: bool = False
) -> tuple[str, str | None]:
    """(message, param) for a failed validation.

    `every`: each problem as `where: what`, joined (a config file, where a person fixes them
    all). With `body` (a door's body against its wire model): the deepest problem, the union
    branch the client meant, at its place in the body (`content.0.text`, not pydantic's
    `content.list[tagged-union[…]].0.text.text`). Otherwise the first problem, and how many
    more there are.
    """
    if every:
        lines = []
        for e in problems:
            where = ".".join(str(p) for p in e["loc"]) or "(top level)"
            lines.append(
                f"{where}: {'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
            )
        return "; ".join(lines), None
    if not problems:
        return "The request is not valid.", None
    if body is not None:
        deepest = max(problems, key=lambda e: len(e["loc"]))
        where = _where(body, deepest["loc"])
        return _one(where, deepest), where or None
    first = problems[0]
    where = ".".join(str(p) for p in first["loc"])
    message = _one(where, first)
    extra = len(problems) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return message, where or None
