"""The direct writes: what the server offers the relay to write a request's answer with,
besides its ASGI `send` (`gateway/serving/outlet.py`, offered by `gateway/edge/connection.py`).

- `body_writer`: a streamed block written to the socket as uvicorn's `send` writes it, without
  an ASGI message and a `send` coroutine each, wherever that `send` would only write;
- `corker`: the client's transport corked while a stream's head and first blocks are written,
  so that they take one write (one system call) instead of one each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.serving.outlet import BodyWriter, uncorked


def body_writer(cycle: RequestResponseCycle, flow: FlowControl) -> BodyWriter:
    """Writes a block of `cycle`'s chunked body (not its last) to its transport at once, framed
    as its `send` frames it; declines (False) wherever that `send` would do more than write it:
    the client's socket is full (it would wait), the client is gone (it would drop the block),
    the head is not out, the body is not chunked, or the response is complete. What `send`
    keeps of the answer (started, complete, keep-alive) is left as `send` would leave it: a
    block that is not the last changes none of it."""

    def write(data: bytes) -> bool:
        if flow.write_paused or cycle.disconnected or cycle.response_complete:
            return False
        if not cycle.chunked_encoding:  # (None: the head has not gone; False: a length)
            return False
        if data:
            cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True

    return write


class _Corked:
    """The client's transport while corked: writes gathered (`flush` writes them as one);
    closing writes them first; everything else is the transport's."""

    __slots__ = ("transport", "parts")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def flush(self) -> None:
        parts = self.parts
        if parts:
            self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))
            parts.clear()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def corker(cycle: RequestResponseCycle) -> Callable[[], Callable[[], None]]:
    """Corks `cycle`'s transport (its `send` and `body_writer` write through it) until the
    returned call: a stream's head and first blocks go to the socket as one write. A cork
    within a cork gathers nothing of its own: the outer one writes it all."""

    def cork() -> Callable[[], None]:
        transport = cycle.transport
        if type(transport) is _Corked:
            return uncorked
        corked = cycle.transport = _Corked(transport)  # type: ignore[assignment]

        def uncork() -> None:
            cycle.transport = transport
            corked.flush()

        return uncork

    return cork
