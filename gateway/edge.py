"""The edge: a lean ASGI path for the generation endpoints.

The generation endpoints take a `Request` and return a `Response`; routing, exception
middleware and the per-route wrappers of Starlette buy nothing on them, yet each one wraps
`send` again, so every streamed block paid for all of them. `Edge` sits inside the access guard
and serves `POST` on those paths itself: it calls the handler, renders a `GatewayError` (or an
unexpected exception) as the OpenAI error envelope, and relays a stream block by block straight
to the server's `send`, with one task per stream watching for the client to go away. Everything
else goes on to the full application.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
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
        if isinstance(response, StreamingResponse):
            await relay(response, receive, send)
        else:
            await response(scope, receive, send)


async def relay(response: StreamingResponse, receive: Receive, send: Send) -> None:
    """Send a streaming response; stop (cancelling the body's generator, which records the
    disconnect) when the client goes away."""
    me = asyncio.current_task()
    assert me is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        me.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    body = response.body_iterator
    try:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not gone:
            raise
        me.uncancel()
    finally:
        watcher.cancel()
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
