"""The edge: a lean ASGI path for the generation endpoints.

The generation endpoints take a `Request` and return a `Response`; routing, exception
middleware and the per-route wrappers of Starlette buy nothing on them, yet each one wraps
`send` again, so every streamed block paid for all of them. `Edge` sits inside the access guard
and serves `POST` on those paths itself: it calls the handler, renders a `GatewayError` (or an
unexpected exception) as the OpenAI error envelope, and lets the response answer (a relayed
stream writes straight to the server's `send`, `gateway/serving/relay.py: StreamRelay`). Everything
else
goes on to the full application.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import GatewayError

log = logging.getLogger("plumbline")

Handler = Callable[[Request], Awaitable[Response]]


def error_response(error: GatewayError) -> Response:
    return Response(error.json(), status_code=error.status, media_type="application/json")


class Edge:
    def __init__(self, app: ASGIApp, routes: dict[str, Handler]):
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.routes.get(scope["path"])
            if handler is not None:
                await self._serve(handler, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(self, handler: Handler, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await handler(Request(scope, receive))
        except GatewayError as e:
            response = error_response(e)
        except Exception:
            log.exception("unhandled error on %s", scope["path"])
            response = error_response(
                GatewayError("The gateway failed to handle this request; it has been logged.")
            )
        await response(scope, receive, send)
