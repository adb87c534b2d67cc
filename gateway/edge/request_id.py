"""Request ids: every answer names its request.

Each HTTP request gets the gateway's own id (`req-` and 24 hex digits), made once when first
asked for and kept in the request's scope: the record of a generation request carries it
(`call_of`), and every answer says it as `x-plumbline-request-id`, whatever its status. Every
answer also carries `x-request-id`: the client's own when it sent one (1 to 128 visible ASCII
characters; another value is not echoed), else the gateway's id, so a client that correlates by
its own id finds it on success, on a 502 before a stream starts, on a 413, 401, 400 or 404.

The generation paths' answers are stamped where they are made (the edge, the access guard, the
relay's `answer_headers`), with no wrapper around `send` on the stream path; the rest of the
application is stamped by the access guard's wrapper (`stamped`).
"""

from __future__ import annotations

import random
import re

from starlette.types import Message, Scope, Send

SCOPE_KEY = "plumbline.request_id"
ECHO = "x-request-id"
OWN = "x-plumbline-request-id"
_ECHO_BYTES = ECHO.encode()
_USABLE = re.compile(rb"[\x21-\x7e]{1,128}")


def new_id() -> str:
    # Unique, not secret: the PRNG (reseeded in forked workers) spares a syscall per request.
    return f"req-{random.getrandbits(96):024x}"


def ids_of(scope: Scope) -> tuple[str, str]:
    """(the gateway's id of this request, the id its answers say in `x-request-id`)."""
    ids: tuple[str, str] | None = scope.get(SCOPE_KEY)
    if ids is None:
        own = new_id()
        sent = None
        for name, value in scope.get("headers") or ():
            if name == _ECHO_BYTES:
                sent = value  # of a repeated header the last, as `headers_of` reads them
        usable = sent is not None and _USABLE.fullmatch(sent) is not None
        ids = scope[SCOPE_KEY] = (own, sent.decode("ascii") if usable and sent else own)
    return ids


def client_id(scope: Scope) -> str | None:
    """The id the client sent in `x-request-id`, if usable."""
    own, echo = ids_of(scope)
    return None if echo == own else echo


def id_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The two headers every answer carries."""
    own, echo = ids_of(scope)
    return [(_ECHO_BYTES, echo.encode()), (OWN.encode(), own.encode())]


def has_id(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == _ECHO_BYTES for name, _ in headers)


def stamped(scope: Scope, send: Send) -> Send:
    """`send`, with the id headers added to the answer's head when it has none."""

    async def stamp(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or ())
            if not has_id(headers):
                message = {**message, "headers": [*headers, *id_headers(scope)]}
        await send(message)

    return stamp
