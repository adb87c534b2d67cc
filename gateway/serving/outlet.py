"""Outlet: writes body blocks to an ASGI `send` from plain callbacks.

A relayed stream arrives as callbacks from the upstream connection (`gateway/serving/wire.py`). The
server's `send` is a coroutine, but it only suspends when the client's socket buffer is full;
otherwise it writes and returns at once. So the outlet runs it in place, with no task: when it
does suspend, reading from the upstream is paused, one task finishes that send and then the
blocks that arrived meanwhile, and reading resumes. A slow client slows its upstream instead of
growing a buffer.

The sends are awaited by one coroutine for the whole stream (`_pump`), stepped by hand with each
message, rather than each started and run to its end by hand: a coroutine run by hand ends by
raising StopIteration; awaited, the server's `send` returns without one (`bench/relay_path.py`
measures a write through uvicorn's `send`).

Where the server offers it (`DIRECT`: `gateway/edge/connection.py`), a body block goes straight to
the client's transport instead, framed as the server frames it, with no message and no send at
all: the writer declines (and the block takes the awaited way) whenever the server's own `send`
would do more than write it — the client's socket is full, the client is gone, the head is not
out or the body is not chunked — and while an awaited send is under way, so order is kept. The
last block always takes the awaited way: the server ends the response there. The server also
offers to cork the client's transport (`Direct.cork`): what is written until it is uncorked goes
out as one write, so a stream's head and first blocks take one system call, not one each.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, NamedTuple

Send = Callable[[dict[str, Any]], Awaitable[None]]
# Writes a body block (not the last) straight to the client, as the server's `send` would have;
# False when it did not (the block is to be sent the awaited way).
BodyWriter = Callable[[bytes], bool]

# Gathers what is written to the client from now on; what it returns writes it all as one.
Cork = Callable[[], Callable[[], None]]


class Direct(NamedTuple):
    """What the server offers to write an answer with besides its `send`."""

    write: BodyWriter
    cork: Cork


# The scope's key for what the server offers to write the request's answer with: (its own
# `send`, a `Direct`), gateway/edge/connection.py.
DIRECT = "plumbline.direct"


def direct_of(scope: Mapping[str, Any], send: Send | None) -> Direct | None:
    """The server's `Direct` for `scope`'s answer, if it offers one and `send` is its own
    (not wrapped by anything that might look at what passes)."""
    offered = scope.get(DIRECT)
    if offered is None or send is None or offered[0] != send:
        return None
    direct: Direct = offered[1]
    return direct


def uncorked() -> None:
    """What a cork that gathers nothing returns: nothing to write."""


# What the pump yields when it has finished a message and waits for the next.
_READY: Any = object()


@types.coroutine
def _pump(send: Send) -> Generator[Any, Any, None]:
    """Await `send` with every message sent in, for as long as the outlet lives: between two,
    it yields `_READY`. A generator-based coroutine, so that waiting for the next message is a
    bare `yield`, not another awaitable made for each."""
    while True:
        message = yield _READY
        sent = send(message)
        # What it awaits, the task driving `_drain` waits on (see `_until_ready`). A native
        # coroutine may be yielded from here (types.coroutine), which mypy does not know.
        yield from sent if type(sent) is types.CoroutineType else sent.__await__()  # type: ignore[misc]


@types.coroutine
def _until_ready(pump: Generator[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """Go on running the pump, suspended in a send on `waiting`, until that send is done: what it
    waits on is waited on by the task this runs in (cancellation is passed in, as await does)."""
    while waiting is not _READY:
        try:
            sent = yield waiting
        except BaseException as e:  # noqa: BLE001 - passed in, like await does
            waiting = pump.throw(e)
        else:
            waiting = pump.send(sent)


class Outlet:
    __slots__ = (
        "_pump",
        "_send",
        "_direct",
        "_cork",
        "_pause",
        "_resume_reading",
        "_backlog",
        "_task",
        "error",
        "closed",
    )

    def __init__(
        self,
        send: Send,
        pause: Callable[[], None],
        resume: Callable[[], None],
        direct: Direct | None = None,
    ):
        self._send = send
        self._direct = direct.write if direct is not None else None
        self._cork = direct.cork if direct is not None else None
        self._pump = self._primed()
        self._pause = pause
        self._resume_reading = resume
        self._backlog: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None  # the send failed: the client is unreachable
        self.closed = False  # the last block was written

    def _primed(self) -> Generator[Any, Any, None]:
        pump = _pump(self._send)
        pump.send(None)  # to its first `_READY`
        return pump

    def corked(self) -> Callable[[], None]:
        """Gather what is written from now on (where the server offers it); the call returned
        writes it all as one."""
        cork = self._cork
        return cork() if cork is not None and self._task is None else uncorked

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The response's head."""
        if self.error is not None or self.closed:
            return
        self._put({"type": "http.response.start", "status": status, "headers": headers}, True)

    def write(self, data: bytes, more: bool = True) -> None:
        if self.error is not None or self.closed:
            return
        direct = self._direct
        if more and direct is not None and self._task is None and direct(data):
            return
        self._put({"type": "http.response.body", "body": data, "more_body": more}, more)

    def _put(self, message: dict[str, Any], more: bool) -> None:
        if self._task is not None:
            self._backlog.append(message)
            return
        try:
            waiting = self._pump.send(message)
        except Exception as e:
            self.error = e
            return
        if waiting is _READY:
            if not more:
                self._close()
            return
        self._pause()
        self._task = asyncio.get_running_loop().create_task(self._drain(waiting, message))

    async def _drain(self, waiting: Any, message: dict[str, Any]) -> None:
        pump = self._pump
        try:
            await _until_ready(pump, waiting)
            if not message.get("more_body", True):
                self._close()
            while self._backlog and not self.closed:
                message = self._backlog.pop(0)
                await _until_ready(pump, pump.send(message))
                if not message.get("more_body", True):
                    self._close()
        except asyncio.CancelledError:
            self._pump = self._primed()  # the cancelled send ended the pump
            raise
        except Exception as e:
            self.error = e
        finally:
            self._backlog.clear()
            self._task = None
        self._resume_reading()

    def _close(self) -> None:
        """The last block is written: the pump waits for no more."""
        self.closed = True
        self._pump.close()

    async def drained(self) -> None:
        """Wait for a suspended send (and what queued behind it) to finish."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)
