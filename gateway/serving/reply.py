"""A reply: one upstream answer on a wire connection (`gateway/serving/wire.py`).

Its body is buffered for `read` / `read_some` (what dispatch does under its first-byte
timeout) until `pipe` hands each block to callbacks as it arrives (a relayed stream, from the
upstream socket to the client's in one callback). The errors a reply ends with
(`gateway/errors.py`): `WireError` (the connection failed), `ReplyTimeout` (the silence sweep
gave up on it).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Protocol

from gateway.errors import WireError


class Link(Protocol):
    """What a reply asks of the connection it arrives on (`wire.Connection`)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...


class Reply:
    """One answer. Its body is buffered for `read`/`read_some` until `pipe` hands each block
    to a callback as it arrives."""

    __slots__ = (
        "_conn",
        "_chunks",
        "_waiter",
        "_error",
        "_on_data",
        "_on_end",
        "_on_error",
        "_decoder",
        "complete",
        "headers",
        "piped",
        "received",
        "status",
    )

    def __init__(self, conn: Link):
        self._conn = conn
        self.status = 0
        self.headers: dict[str, str] = {}
        self.complete = False
        self.received = False  # any byte of the answer arrived
        self._chunks: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[], None] | None = None
        self._on_error: Callable[[BaseException], None] | None = None
        self._decoder: zlib._Decompress | None = None
        # Where the connection hands each block straight to (`pipe`'s `on_data`) while the
        # body is piped as it came; None: to `feed` (buffered, or decoded first).
        self.piped: Callable[[bytes], None] | None = None

    # -- reading --------------------------------------------------------------------------
    async def read(self) -> bytes:
        """The whole body."""
        while not self.complete:
            await self._wait()
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data

    async def read_some(self) -> bytes:
        """The next buffered bytes (waiting for some); b"" once the body has ended."""
        while not self._chunks and not self.complete:
            await self._wait()
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def pipe(
        self,
        on_data: Callable[[bytes], None],
        on_end: Callable[[], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        """From now on every body block goes to `on_data` as it arrives, then `on_end` (or
        `on_error` once). What was buffered goes first; an ended reply ends at once."""
        self._on_data, self._on_end, self._on_error = on_data, on_end, on_error
        if self._decoder is None:
            self.piped = on_data
        if self._chunks:
            data = b"".join(self._chunks)
            self._chunks.clear()
            on_data(data)
        if self._error is not None:
            self._deliver_error()
        elif self.complete:
            self._deliver_end()

    def pause(self) -> None:
        self._conn.pause()

    def resume(self) -> None:
        self._conn.resume()

    # -- ending ---------------------------------------------------------------------------
    def release(self) -> None:
        """Done with this reply: its connection is kept for the next request when the body
        was read to its end, else closed."""
        if not self.complete:
            self._conn.close()

    def close(self) -> None:
        self._conn.close()
        if not self.complete and self._error is None:
            self.lost(WireError("closed by the gateway"))

    def fail(self, error: BaseException) -> None:
        """Give up on this reply with `error` (the silence sweep's timeout)."""
        if self.complete or self._error is not None:
            return
        self.lost(error)
        self._conn.close()

    # -- from the connection: its bytes, its end, its loss -----------------------------------------
    def feed(self, data: bytes) -> None:
        if self._decoder is not None:
            data = self._decoder.decompress(data)
            if not data:
                return
        if self._on_data is not None:
            self._on_data(data)
            return
        self._chunks.append(data)
        self._wake()

    def end(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            self._decoder = None
            if tail:
                self.feed(tail)
        self.complete = True
        if self._on_end is not None:
            self._deliver_end()
        else:
            self._wake()

    def lost(self, error: BaseException) -> None:
        if self.complete or self._error is not None:
            return
        self._error = error
        if self._on_error is not None:
            self._deliver_error()
        else:
            self._wake()

    def _deliver_end(self) -> None:
        on_end = self._on_end
        self._on_data = self._on_end = self._on_error = self.piped = None
        if on_end is not None:
            on_end()

    def _deliver_error(self) -> None:
        on_error = self._on_error
        self._on_data = self._on_end = self._on_error = self.piped = None
        if on_error is not None and self._error is not None:
            on_error(self._error)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
