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
    ├── GatewayShutdown       503 service_unavailable     (the graceful shutdown's limit ended it)
    ├── AllUpstreamsFailed    502 upstream_error          (every attempt failed; keeps each cause)
    │   └── UpstreamTimeout   504 timeout_error
    └── NotAnAsset            404 invalid_request_error   (the console: no such static file)

One handler renders them all as `{"error": {"message", "type", "param", "code"}}`. Messages say
what was wrong and never carry secrets, upstream bodies or tracebacks. `describe` is the one
place a pydantic validation failure (a request body, a config file) becomes such a message.

Internal errors: raised on the serving path (the upstream client, the wire, the taps, adapt)
and caught there, never rendered as they are; where one ends a request, the client gets:

    BadRequest
    └── Unfit                 400 unsupported_parameter   (this upstream cannot serve it as asked:
        │                                                  dispatch tries the next; the client's
        │                                                  400 when no candidate could)
        └── ContextExceeded   400 context_length_exceeded
    AttemptError              one attempt failed before a byte reached the client: retried or
                              the next candidate tried; a 502/504 AllUpstreamsFailed naming each
                              cause when none is left, a 400 upstream_<status> when the
                              upstream's 4xx was the request's fault (`client_error`)
    WireError (OSError)       the connection failed: an AttemptError before the answer began,
    └── ConnectFailed         a 502 error event after it (the stream relay)
    ReplyTimeout (TimeoutError)  the silence sweep gave up: a 502 error event, "went silent"
    MalformedStream           the upstream sent what is not JSON: a 502 AllUpstreamsFailed (an
    ├── UpstreamStreamError   error event mid-stream); it reported an error inside the
    │                         stream: an error event, recorded with its status (400-599, else
    │                         502)
    └── UpstreamCut           it ended the stream (cleanly, at the HTTP level) before it said
                              it had finished (no finish reason, no [DONE]): an error event,
                              recorded as a 502 the upstream cut (truncated)
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


class GatewayShutdown(GatewayError):
    """The gateway is stopping and its graceful shutdown's limit ended the request."""

    status = 503
    type = "service_unavailable"
    code = "gateway_shutdown"


class UpstreamTimeout(AllUpstreamsFailed):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


class NotAnAsset(GatewayError):
    """The console has no static file of that name."""

    status = 404
    type = "invalid_request_error"


def sse_error_event(error: GatewayError) -> bytes:
    """The event that ends a stream that broke after its first byte reached the client."""
    return b"data: " + error.json() + b"\n\ndata: [DONE]\n\n"


# ---- internal errors: the serving path's own, caught there (a client's answer: the docstring)


class Unfit(BadRequest):
    """This upstream cannot serve the request as asked (dispatch tries the next candidate)."""

    code = "unsupported_parameter"


class ContextExceeded(Unfit):
    code = "context_length_exceeded"


class AttemptError(Exception):
    """One attempt failed before anything reached the client."""

    def __init__(
        self,
        outcome: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
        client_error: bool = False,
        param: str | None = None,
    ):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        # A 4xx that is the request's fault: return it to the client instead of falling back.
        self.client_error = client_error
        # The request field the upstream's error named (its `error.param`), relayed as is.
        self.param = param


class WireError(OSError):
    """The connection failed: refused, reset, closed early, or the answer was not HTTP."""


class ConnectFailed(WireError):
    """No connection could be made (refused, unreachable, timed out): nothing was sent."""


class ReplyTimeout(TimeoutError):
    """The silence sweep gave up on a reply: a `TimeoutError`, which the relay reports as an
    upstream gone silent mid-stream."""


class MalformedStream(Exception):
    """The upstream sent an event that is not valid JSON. `partial` holds the output of the
    events before it in the same block, which the client must still get."""

    partial = b""


class UpstreamStreamError(MalformedStream):
    """The upstream reported an error inside the stream (OpenRouter: an `error` object on a
    chunk, its choice's `finish_reason` "error"): the answer ended in failure, not success.
    `status`: the error's HTTP-like code when it gave one in 400-599, else 502."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class UpstreamCut(MalformedStream):
    """The upstream ended a stream before it said it had finished: no choice's finish reason
    and no `[DONE]` (an HTTP/1.0 close, an exact Content-Length, a last chunk that came too
    soon), or no event at all. `partial`: as `MalformedStream`'s."""


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
