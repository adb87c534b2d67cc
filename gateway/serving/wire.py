"""Wire: the relay's HTTP/1.1 client, built on asyncio transports and llhttp (httptools).

aiohttp hands every received block to a stream reader, wakes the task that waits on it, and
that task passes the block up through two async generators before it is written to the client:
at 2,048 paced streams that hand-over was most of the gateway's CPU per chunk
(`bench/gateway_profile.py --scenario seed`). Here the connection's parser calls back with each
body block, so a relayed stream (`Reply.pipe`) goes from the upstream socket to the client's
in one callback, with no task in between. Until then a reply is read like any other
(`read`, `read_some`), which is what dispatch does under its first-byte timeout
(`gateway/serving/reply.py`).

One pool of keep-alive connections per origin; plain HTTP and TLS. A request on a reused
connection that the server had already closed is sent once more on a new one (nothing of an
answer was received, so the server cannot have acted on it).
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from gateway.errors import ConnectFailed, WireError
from gateway.logs import REQUEST_ID
from gateway.serving.reply import Reply


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    # "host[:port]" as sent in the Host header
    authority: str
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        authority = shown if port == default else f"{shown}:{port}"
        return cls(parts.scheme, host, port, authority, parts.path.rstrip("/"))


def head_block(headers: dict[str, str]) -> bytes:
    """Request headers rendered once, for every request that carries them."""
    lines = []
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} holds a line break")
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


class Connection(asyncio.Protocol):
    """One keep-alive connection to an origin; one request at a time."""

    def __init__(self, pool: Wire, origin: Origin):
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reply: Reply | None = None
        self.closed = False
        self.idle_since = 0.0
        self._header_name = b""
        self._headers_waiter: asyncio.Future[None] | None = None
        self._until_eof = False
        self._paused = False
        # Body parts the parser found in one read, handed on as one block after it (a busy
        # upstream's events arrive many to a read; each handing-on costs a write to the client).
        self._parts: list[bytes] = []

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reply = self.reply
        if reply is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        reply.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._parts.clear()
            self._lost(WireError(f"the upstream's answer is not valid HTTP ({e})"))
            self.close()
            return
        parts = self._parts
        if parts:  # `_hand_on`, in place: this runs for every block
            block = parts[0] if len(parts) == 1 else b"".join(parts)
            parts.clear()
            reply = self.reply
            if reply is not None:
                piped = reply.piped
                if piped is not None:
                    piped(block)
                else:
                    reply.feed(block)

    def _hand_on(self) -> None:
        parts = self._parts
        block = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        if self.reply is not None:
            self.reply.feed(block)

    def eof_received(self) -> bool | None:
        reply = self.reply
        if reply is not None and self._until_eof and reply.status:
            reply.end()
            self.reply = None
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        self._lost(WireError("the upstream closed the connection" + (f" ({exc})" if exc else "")))
        # The parser calls back into this connection (it holds it): with no data to come, it
        # goes, so a closed connection is not a reference cycle left to the cyclic collector.
        del self.parser

    # -- httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.reply is not None
        key = name.decode("latin-1").lower()
        self.reply.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        reply = self.reply
        assert reply is not None
        reply.status = self.parser.get_status_code()
        if reply.status < 200:
            return  # 1xx: the answer follows; `on_message_complete` starts over
        headers = reply.headers
        self._until_eof = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
            and reply.status not in (204, 304)
        )
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            reply._decoder = zlib.decompressobj(wbits=47)  # gzip or zlib, by their header
        elif encoding != "identity":
            self._lost(WireError(f"the upstream sent an unsupported encoding {encoding!r}"))
            self.close()
            return
        waiter = self._headers_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)

    def on_message_complete(self) -> None:
        reply = self.reply
        if reply is not None and reply.status < 200:
            reply.status = 0
            reply.headers.clear()
            return
        if self._parts:
            self._hand_on()
        self.reply = None
        keep = self.parser.should_keep_alive() and not self._until_eof
        if reply is not None:
            reply.end()
        if keep and not self.closed:
            self.pool._idle(self)
        else:
            self.close()

    # -- use ------------------------------------------------------------------------------
    async def send(self, request: bytes, sent: Callable[[], None] | None = None) -> Reply:
        """Write `request`; the reply once its head is in. `sent` is called once the request is
        written, before the wait: work the upstream need not wait for, done while it works."""
        assert self.transport is not None
        reply = self.reply = Reply(self)
        self._until_eof = False
        waiter = self._headers_waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            if sent is not None:
                sent()
            await waiter
        except BaseException:  # cancelled, or `sent` failed: the answer will not be read
            self.close()
            raise
        finally:
            if self._headers_waiter is waiter:  # the connection may already serve the next
                self._headers_waiter = None
        if reply._error is not None:
            raise reply._error
        return reply

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()
        self.pool._forget(self)

    def _lost(self, error: WireError) -> None:
        reply = self.reply
        if reply is None:
            return
        if self._until_eof and reply.status:
            self.reply = None
            reply.end()
            return
        # A lost connection serves no reply after this one; the reply holds the connection, so
        # keeping it would make the two a reference cycle, left to the cyclic collector.
        self.reply = None
        waiter = self._headers_waiter
        reply.lost(error)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Wire:
    """Keep-alive connection pools, one per origin."""

    def __init__(self, connect_timeout: float, keepalive_s: float = 60.0):
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self._pools: dict[Origin, deque[Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._busy: set[Connection] = set()

    async def post(
        self,
        origin: Origin,
        path: str,
        head: bytes,
        body: bytes,
        method: bytes = b"POST",
        sent: Callable[[], None] | None = None,
    ) -> Reply:
        """Send `body` to `origin`; the reply once its status and headers are in. `sent`: called
        once the request is written (`Connection.send`); when a kept connection turns out
        closed, the request is written anew and `sent` called again (it must be idempotent)."""
        request = b"".join(
            (
                method,
                b" ",
                (origin.base_path + path).encode(),
                b" HTTP/1.1\r\nHost: ",
                origin.authority.encode(),
                b"\r\nContent-Length: ",
                str(len(body)).encode(),
                b"\r\n",
                head,
                b"\r\n",
                body,
            )
        )
        conn = self._checkout(origin)
        if conn is not None:
            try:
                return await conn.send(request, sent)
            except WireError:
                if conn.reply is not None and conn.reply.received:
                    raise
                # a kept connection the server had closed: nothing was read, send it anew
        conn = await self._connect(origin)
        return await conn.send(request, sent)

    def _checkout(self, origin: Origin) -> Connection | None:
        idle = self._pools.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > self.keepalive_s:
                conn.close()
                continue
            self._busy.add(conn)
            return conn
        return None

    async def _connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        tls = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            # Opened outside the asking request's context: the connection's callbacks serve
            # later requests too, so their log lines name none (gateway/logs.py).
            fresh = contextvars.copy_context()
            fresh.run(REQUEST_ID.set, "-")
            opening = loop.create_connection(
                lambda: Connection(self, origin),
                origin.host,
                origin.port,
                ssl=tls,
                server_hostname=origin.host if tls else None,
            )
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.create_task(opening, context=fresh)
        except TimeoutError:
            raise ConnectFailed(f"no connection within {self.connect_timeout:g}s") from None
        except OSError as e:
            if isinstance(e, WireError):
                raise
            # Named by its class only: the OS's text names the address (callers name the upstream).
            raise ConnectFailed(f"cannot connect ({type(e).__name__})") from None
        self._busy.add(conn)
        return conn

    def _idle(self, conn: Connection) -> None:
        self._busy.discard(conn)
        conn.idle_since = time.monotonic()
        self._pools.setdefault(conn.origin, deque()).append(conn)

    def _forget(self, conn: Connection) -> None:
        self._busy.discard(conn)
        idle = self._pools.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    async def close(self) -> None:
        for conn in [*self._busy, *(c for idle in self._pools.values() for c in idle)]:
            conn.close()
        self._pools.clear()
        self._busy.clear()
