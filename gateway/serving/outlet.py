"""Outlet: writes body blocks to an ASGI `send` from plain callbacks.

A relayed stream arrives as callbacks from the upstream connection (`gateway/serving/wire.py`). The
server's `send` is a coroutine, but it only suspends when the client's socket buffer is full;
otherwise it writes and returns at once. So the outlet runs it in place, with no task: when it
does suspend, reading from the upstream is paused, one task finishes that send and then the
blocks that arrived meanwhile, and reading resumes. A slow client slows its upstream instead of
growing a buffer.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, cast

Send = Callable[[dict[str, Any]], Awaitable[None]]


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], waiting: Any) -> Generator[Any, Any, None]:
    """Go on running a coroutine that was started by hand and suspended on `waiting`."""
    while True:
        try:
            sent = yield waiting
        except BaseException as e:  # noqa: BLE001 - cancellation is passed in, like await does
            try:
                waiting = coro.throw(e)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration:
                return


class Outlet:
    __slots__ = ("_send", "_pause", "_resume_reading", "_backlog", "_task", "error", "closed")

    def __init__(self, send: Send, pause: Callable[[], None], resume: Callable[[], None]):
        self._send = send
        self._pause = pause
        self._resume_reading = resume
        self._backlog: list[tuple[bytes, bool]] = []
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None  # the send failed: the client is unreachable
        self.closed = False  # the last block was written

    def write(self, data: bytes, more: bool = True) -> None:
        if self.error is not None or self.closed:
            return
        if self._task is not None:
            self._backlog.append((data, more))
            return
        # Servers' `send` are coroutine functions (Starlette types them as returning Awaitable).
        coro = cast(
            Coroutine[Any, Any, Any],
            self._send({"type": "http.response.body", "body": data, "more_body": more}),
        )
        try:
            waiting = coro.send(None)
        except StopIteration:
            self.closed = not more
            return
        except Exception as e:
            self.error = e
            return
        self._pause()
        self._task = asyncio.get_running_loop().create_task(self._drain(coro, waiting, more))

    async def _drain(self, coro: Coroutine[Any, Any, Any], waiting: Any, more: bool) -> None:
        try:
            await _resume(coro, waiting)
            self.closed = not more
            while self._backlog and not self.closed:
                data, more = self._backlog.pop(0)
                await self._send({"type": "http.response.body", "body": data, "more_body": more})
                self.closed = not more
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.error = e
        finally:
            self._backlog.clear()
            self._task = None
        self._resume_reading()

    async def drained(self) -> None:
        """Wait for a suspended send (and what queued behind it) to finish."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
