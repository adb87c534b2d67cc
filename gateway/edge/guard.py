"""The access guard: the ASGI middleware in front of every route.

Before a handler runs it bounds the request head, authenticates the presented key, checks the
route's role, and for a generation request reads the body (bounded), checks the model and
reserves the key's budget (`gateway.edge.access.Access`). Refusals are rendered by the edge's
error renderer (`gateway/edge/render.py`). There is one guard, in front of everything
(`gateway.edge.fastpath.GatewayApp`): the generation paths' edge and the full application.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.edge.access import (
    CURRENT_TICKET,
    Access,
    Key,
    Ticket,
    presented_key,
)
from gateway.edge.console import credentials as console
from gateway.edge.lane import LANE_ROLE, on_eval_lane
from gateway.edge.rejected import refuse
from gateway.edge.render import send_error
from gateway.edge.request import ASKED, PARSED
from gateway.edge.request_id import ids_of
from gateway.errors import (
    BodyTooLarge,
    Forbidden,
    GatewayError,
    HeadersTooLarge,
    RateLimited,
    Unauthorized,
)
from gateway.logs import REQUEST_ID


def _role_needed(path: str, access: Access) -> tuple[str, ...] | None:
    """Which roles may call this path (None: anyone)."""
    if path.startswith("/admin"):
        return ("admin",)
    if console.is_console(path):
        return console.ROLES
    if path == "/metrics":
        return ("admin", "metrics") if access.config.metrics_requires_key else None
    if path.startswith("/v1/") or path == "/v1":
        return None if access.open else ("client",)
    return None  # /health, /openapi.json


async def _error(
    scope: Scope,
    send: Send,
    error: GatewayError,
    headers: list[tuple[bytes, bytes]],
    key: Key | None = None,
) -> None:
    refuse(scope, error, key.id if key is not None else None)  # counted (gateway/edge/rejected.py)
    await send_error(scope, send, error, headers)


class AccessGuard:
    """ASGI middleware: bound the request head, authenticate, check the route's role, the model
    and the budget. The head's size is checked exactly here, on the parsed headers; what is
    buffered before (httptools has no limit of its own) is bounded as it arrives by the
    connection (`gateway/edge/connection.py`). Its refusals carry the request ids (every other
    answer is stamped behind it: `gateway/edge/fastpath.py`). `generation`: the paths whose
    `POST` is a generation request (the request table's), checked for the model and budget."""

    def __init__(
        self,
        app: ASGIApp,
        access: Access,
        max_body_bytes: int,
        max_header_bytes: int = 64 * 1024,
        generation: Collection[str] = frozenset(),
    ):
        self.app = app
        self.access = access
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        REQUEST_ID.set(ids_of(scope)[0])  # on the log lines of this request (gateway/logs.py)
        raw = scope["headers"]
        size = 4 * len(raw) + sum(map(len, itertools.chain.from_iterable(raw)))
        if size > self.max_header_bytes:
            await _error(
                scope,
                send,
                HeadersTooLarge(
                    f"The request headers are {size} bytes; the limit is {self.max_header_bytes}."
                ),
                [(b"connection", b"close")],
            )
            return
        path: str = scope["path"]
        roles = _role_needed(path, self.access)
        token = presented_key(scope["headers"])
        if token is None and roles is console.ROLES:  # a browser on the console: Basic auth
            token = console.basic_password(scope["headers"])
        key = await self.access.authenticate(token) if token is not None else None
        scope.setdefault("state", {})["key_role"] = key.role if key else None
        if key is not None and key.role == LANE_ROLE:
            await self._lane(scope, receive, send, key)
            return
        if roles is None:
            await self._call(scope, receive, send, key if key and key.role == "client" else None)
            return
        if key is None:
            message = (
                "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'."
                if token is None
                else "Invalid API key."
            )
            challenge = console.CHALLENGE if roles is console.ROLES else b"Bearer"
            await _error(scope, send, Unauthorized(message), [(b"www-authenticate", challenge)])
            return
        if key.role not in roles:
            needed = " or ".join(roles)
            await _error(
                scope,
                send,
                Forbidden(f"A {key.role} key cannot be used for {path}; it needs a {needed} key."),
                [],
            )
            return
        if key.role == "client":
            await self._client(scope, receive, send, key)
        else:
            await self._call(scope, receive, send, None)

    async def _client(self, scope: Scope, receive: Receive, send: Send, key: Key) -> None:
        """A client key's request. Never on the eval lane where /v1 asks for keys: the lane
        pins upstreams and is counted apart from client traffic, and is its credential's alone
        (`_lane`)."""
        if on_eval_lane(scope["headers"]):
            message = (
                "A client key cannot send requests on the eval lane (x-plumbline-lane: eval): "
                "that lane is the gateway's own eval rounds'. Leave the header out."
            )
            await _error(scope, send, Forbidden(message), [], key)
        elif scope["method"] != "POST" or scope["path"] not in self.generation:
            await self._call(scope, receive, send, key)
        else:
            await self._generation(scope, receive, send, key)

    async def _lane(self, scope: Scope, receive: Receive, send: Send, key: Key) -> None:
        """The eval lane's credential: /v1 on the eval lane, and nothing else."""
        path: str = scope["path"]
        if (path.startswith("/v1/") or path == "/v1") and on_eval_lane(scope["headers"]):
            await self._call(scope, receive, send, key)
            return
        await _error(
            scope,
            send,
            Forbidden(
                "The eval lane's credential is good only for /v1 requests on the eval lane "
                "(x-plumbline-lane: eval)."
            ),
            [],
        )

    async def _generation(self, scope: Scope, receive: Receive, send: Send, key: Key) -> None:
        if key.models is None and not key.budgeted:
            await self._call(scope, receive, send, key)
            return
        try:
            raw, receive = await _buffer(receive, self.max_body_bytes)
        except BodyTooLarge as e:
            await _error(scope, send, e, [])
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        else:  # the handler's `read_json` takes it from here rather than parsing it again
            scope[PARSED] = (raw, body)
        body = body if isinstance(body, dict) else None
        model = body.get("model") if body is not None else None
        scope[ASKED] = model
        try:
            ticket = await self.access.admit(
                key, model if isinstance(model, str) else None, body, len(raw)
            )
        except RateLimited as e:
            await _error(scope, send, e, [(b"retry-after", str(int(e.retry_after)).encode())], key)
            return
        except Forbidden as e:
            await _error(scope, send, e, [], key)
            return
        await self._call(scope, receive, send, key, ticket)

    async def _call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: Key | None,
        ticket: Ticket | None = None,
    ) -> None:
        if key is None:
            await self.app(scope, receive, send)
            return
        ticket = ticket or Ticket(key)
        token = CURRENT_TICKET.set(ticket)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_TICKET.reset(token)
            self.access.settle(ticket, 0)  # no record came (rejected early): release the tokens


async def _buffer(receive: Receive, limit: int) -> tuple[bytes, Receive]:
    """Read the whole body (at most `limit` bytes) and a `receive` that replays it."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), receive
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
        more = message.get("more_body", False)
    raw = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return raw, replay
