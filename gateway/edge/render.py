"""The edge's one error renderer: every refusal and failure as an error body, with the ids.

An error is the OpenAI envelope (`GatewayError.json`), except on the Messages door, which
answers in Anthropic's shape (`gateway/edge/doors/messages/errors.py`). The access guard sends
its refusals with `send_error` (before any handler: the door is told by the path); the edge's
handlers return `error_response`; the rest of the application renders through the handlers
`install_error_handlers` puts on it: the gateway's errors, Starlette's (404, 405), a body that
fails validation, and anything unexpected (logged). Every answer carries the request ids
(`gateway/edge/request_id.py`).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope, Send

from gateway.edge.doors.messages import errors as anthropic
from gateway.edge.request_id import id_headers
from gateway.errors import BadRequest, GatewayError, describe

log = logging.getLogger("plumbline")

JSON = "application/json"
MESSAGES = "/v1/messages"  # the Messages door's paths answer in Anthropic's shape


def unexpected() -> GatewayError:
    """What the client is told of an exception the gateway did not expect (it is logged)."""
    return GatewayError("The gateway failed to handle this request; it has been logged.")


def rendered(error: GatewayError, anthropic_shape: bool = False) -> tuple[int, bytes]:
    """(the status, the body) of `error`: the OpenAI envelope, or Anthropic's shape."""
    if anthropic_shape:
        return anthropic.rendered(error)
    return error.status, error.json()


def error_response(error: GatewayError, anthropic_shape: bool = False) -> Response:
    status, body = rendered(error, anthropic_shape)
    return Response(body, status_code=status, media_type=JSON)


async def send_error(
    scope: Scope, send: Send, error: GatewayError, headers: list[tuple[bytes, bytes]]
) -> None:
    """`error` sent as the whole answer, with `headers` and the request ids; in Anthropic's
    shape on the Messages door's paths."""
    status, body = rendered(error, scope.get("path", "").startswith(MESSAGES))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                *headers,
                *id_headers(scope),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_error(request: Request, exc: HTTPException) -> GatewayError:
    """Starlette's 404 or 405 (or another HTTP error) as a gateway error."""
    kind = GatewayError(str(exc.detail))
    kind.status = exc.status_code
    kind.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    if exc.status_code == 404:
        kind.message = f"Unknown path: {request.url.path}"
    elif exc.status_code == 405:
        kind.message = f"Method {request.method} is not allowed on {request.url.path}"
    return kind


def install_error_handlers(app: FastAPI) -> None:
    """Every error of the full application as the OpenAI error envelope: the gateway's own,
    Starlette's (404, 405), a body that fails validation, and anything unexpected (logged)."""

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        return error_response(http_error(request, exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        message, param = describe(exc.errors())
        return error_response(BadRequest(f"Invalid request: {message}", param=param))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(unexpected())
