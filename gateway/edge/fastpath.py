"""The edge: a lean ASGI path for the generation endpoints.

The generation endpoints take a `Request` and return a `Response`; routing, exception
middleware and the per-route wrappers of Starlette buy nothing on them, yet each one wraps
`send` again, so every streamed block paid for all of them. `Edge` sits inside the access guard
and serves `POST` on those paths itself: it calls the handler, renders a `GatewayError` (or an
unexpected exception) as the OpenAI error envelope, and lets the response answer (a relayed
stream writes straight to the server's `send`, `gateway/serving/stream_relay.py`). `GatewayApp`
sends everything else on to the full application, whose errors the handlers of
`install_error_handlers` render the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.edge.rejected import refuse
from gateway.edge.request import SEND
from gateway.edge.request_id import has_id, id_headers
from gateway.errors import BadRequest, GatewayError, describe
from gateway.serving.relay import Answered
from gateway.serving.stream_relay import StreamRelay

log = logging.getLogger("plumbline")

Handler = Callable[[Request], Awaitable[Response]]


def error_response(error: GatewayError) -> Response:
    return Response(error.json(), status_code=error.status, media_type="application/json")


class Edge:
    """Serves a `POST` on one of `routes` (`GatewayApp` sends it no other request). Every answer
    carries the request ids (`gateway/edge/request_id.py`): a relayed one has them from the
    relay, any other is stamped here."""

    def __init__(self, routes: dict[str, Handler]):
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SEND] = send  # a stream's head may go before its handler returns (`call_of`)
        try:
            response = await self.routes[scope["path"]](Request(scope, receive))
        except GatewayError as e:
            refuse(scope, e)  # without a record: counted as refused (gateway/edge/rejected.py)
            response = error_response(e)
        except Exception:
            log.exception("unhandled error on %s", scope["path"])
            error = GatewayError("The gateway failed to handle this request; it has been logged.")
            refuse(scope, error)
            response = error_response(error)
        if type(response) not in _STAMPED and not has_id(response.raw_headers):
            response.raw_headers.extend(id_headers(scope))
        await response(scope, receive, send)


_STAMPED = (StreamRelay, Answered)  # their headers carry the ids (`relay.answer_headers`)


class GatewayApp(FastAPI):
    """The FastAPI app, with the generation endpoints taken before Starlette's stack.

    Starlette wraps every request in its error middleware, whose `send` wrapper every streamed
    block went through, and routes it; the generation endpoints need neither (the edge renders
    their errors). `front` (the access guard around the edge) serves `POST` on `hot`; the rest
    goes through the full application, with its own access guard."""

    front: ASGIApp | None = None
    hot: frozenset[str] = frozenset()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.front is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in self.hot
        ):
            scope["app"] = self
            await self.front(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


HOT_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
)


def install_error_handlers(app: FastAPI) -> None:
    """Every error of the full application as the OpenAI error envelope: the gateway's own,
    Starlette's (404, 405), a body that fails validation, and anything unexpected (logged)."""

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        kind = GatewayError(str(exc.detail))
        kind.status = exc.status_code
        kind.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        if exc.status_code == 404:
            kind.message = f"Unknown path: {request.url.path}"
        elif exc.status_code == 405:
            kind.message = f"Method {request.method} is not allowed on {request.url.path}"
        return error_response(kind)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        message, param = describe(exc.errors())
        return error_response(BadRequest(f"Invalid request: {message}", param=param))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        error = GatewayError("The gateway failed to handle this request; it has been logged.")
        return error_response(error)
