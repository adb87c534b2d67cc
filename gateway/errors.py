"""Errors the gateway raises, each knowing its HTTP status and OpenAI error `type`.

    GatewayError
    ├── BadRequest            400 invalid_request_error   (malformed JSON, wrong types, bad values)
    │   └── BodyTooLarge      413 invalid_request_error
    ├── Unauthorized          401 authentication_error
    ├── ModelNotFound         404 invalid_request_error   (code model_not_found)
    ├── UpstreamUnavailable   503 service_unavailable     (no candidate could be tried)
    └── AllUpstreamsFailed    502 upstream_error          (every attempt failed; keeps each cause)
        └── UpstreamTimeout   504 timeout_error

One handler renders them all as `{"error": {"message", "type", "param", "code"}}`. Messages say
what was wrong and never carry secrets, upstream bodies or tracebacks.
"""

from __future__ import annotations

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
