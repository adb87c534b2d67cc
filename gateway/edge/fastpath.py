"""The edge: one way in, a lean ASGI path for the generation endpoints.

`GatewayApp` is the FastAPI app built from the request table (`gateway/edge/table.py`). Every
HTTP request goes through its one access guard (`gateway/edge/guard.py`); behind it, a `POST` on
a generation path is served by `Edge`, everything else by the full application.

The generation endpoints take a `Request` and return a `Response`; routing, exception
middleware and the per-route wrappers of Starlette buy nothing on them, yet each one wraps
`send` again, so every streamed block paid for all of them. `Edge` calls the handler, renders a
`GatewayError` (or an unexpected exception) with the edge's error renderer
(`gateway/edge/render.py`), and lets the response answer (a relayed stream writes straight to
the server's `send`, `gateway/serving/stream_relay.py`). The full application renders its errors
with the same renderer, through its exception handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.edge.access import Access
from gateway.edge.guard import AccessGuard
from gateway.edge.rejected import refuse
from gateway.edge.render import error_response, install_error_handlers, unexpected
from gateway.edge.request import BODY, SEND
from gateway.edge.request_id import has_id, id_headers, stamped
from gateway.edge.route import Handler, Route
from gateway.errors import GatewayError
from gateway.serving.outlet import DIRECT
from gateway.serving.relay import Answered
from gateway.serving.stream_relay import StreamRelay

log = logging.getLogger("plumbline")


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
            error = unexpected()
            refuse(scope, error)
            response = error_response(error)
        if type(response) not in _STAMPED and not has_id(response.raw_headers):
            response.raw_headers.extend(id_headers(scope))
        await response(scope, receive, send)


_STAMPED = (StreamRelay, Answered)  # their headers carry the ids (`relay.answer_headers`)


class KeepBody:
    """store_content: marks each generation request's scope so that `read_json` leaves the body
    it read there (`BODY`), for `call_of` to hand to the request's capture. Not in the app at
    all when store_content is off."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[BODY] = None
        await self.app(scope, receive, send)


class GatewayApp(FastAPI):
    """The FastAPI app, with one access guard in front of everything and the generation
    endpoints taken before Starlette's stack.

    Starlette wraps every request in its error middleware, whose `send` wrapper every streamed
    block went through, and routes it; the generation endpoints need neither (the edge renders
    their errors). Behind the guard, `edge` serves `POST` on `hot`; the rest goes through the
    full application, its answers stamped with the request ids on their way out."""

    guard: ASGIApp | None = None
    edge: ASGIApp | None = None
    hot: frozenset[str] = frozenset()

    def serve_table(
        self,
        table: Iterable[Route],
        access: Access,
        *,
        max_body_bytes: int,
        max_header_bytes: int,
        keep_body: bool = False,
    ) -> None:
        """Serve `table`: every row in the router (served there, documented in the schema),
        the generation rows' `POST` by the edge, all of it behind one access guard."""
        rows = list(table)
        self.router.routes.extend(row.api_route() for row in rows)
        hot = {row.path: row.handler for row in rows if row.generation}
        self.hot = frozenset(hot)
        edge: ASGIApp = Edge(hot)
        self.edge = KeepBody(edge) if keep_body else edge
        self.guard = AccessGuard(
            self._behind_guard,
            access,
            max_body_bytes=max_body_bytes,
            max_header_bytes=max_header_bytes,
            generation=self.hot,
        )
        install_error_handlers(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard is not None and scope["type"] == "http":
            scope["app"] = self
            try:
                await self.guard(scope, receive, send)
            finally:
                # The server's `send` and writer (its request cycle's methods) in the scope the
                # cycle holds: a reference cycle per request, left to the collector otherwise.
                scope.pop(SEND, None)
                scope.pop(DIRECT, None)
            return
        await super().__call__(scope, receive, send)

    async def _behind_guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.edge is not None and scope["method"] == "POST" and scope["path"] in self.hot:
            await self.edge(scope, receive, send)
            return
        await super().__call__(scope, receive, stamped(scope, send))
