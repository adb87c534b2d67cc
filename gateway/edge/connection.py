"""The connection: each client connection bounded as a proxy bounds it (docs/limits.md).

The gateway's HTTP server is uvicorn with its httptools protocol. Of a proxy's limits, uvicorn
has only two, and neither holds as one would want: `timeout_keep_alive` is armed after a
response, never on a new connection nor while a request head trickles in (an idle or
slowloris connection is held for ever), and `limit_concurrency` answers its 503 only to a
request whose head is complete. llhttp (through httptools) has no header size limit (the head
is buffered whole before the app sees it), and neither a request body nor the answer has a
timeout: `send` waits on the client's socket for as long as the client leaves it full.
(Its h11 protocol has `h11_max_incomplete_event_size`, but is several times slower a chunk.)

`BoundedHttp` is uvicorn's httptools protocol with the rest added where they happen, on the
connection's events, so the per-chunk path of an answer is unchanged:
- a new connection past `max_connections` is answered 503 (past its ceiling, closed at once),
  with a log line, before file descriptors run out (`limits_for` fits the limit to them);
- a connection with no request is closed after `keepalive_timeout_s`;
- a request head not complete within `header_timeout_s` gets a 408; one that passes
  `max_header_bytes` gets a 431, counted as its bytes arrive (memory stays flat);
- a body that stops for `body_timeout_s` (while the app waits for it) gets a 408;
- a client whose socket stays full for `send_timeout_s` is dropped: the app sees it gone
  (`http.disconnect`), so a relayed stream stops its upstream request and records a 499
  with error_class "SendTimeout".
Each of these is logged (at most one line per kind every `LOG_EVERY_S`, with the count since).

Each request's scope also offers the relay a writer for its answer's body blocks and a cork for
its transport (`gateway/edge/direct.py`, `gateway/serving/outlet.py`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config.server import ServerConfig
from gateway.edge.direct import body_writer, corker
from gateway.edge.request_id import ECHO, OWN, ids_of, new_id
from gateway.errors import GatewayError, HeadersTooLarge
from gateway.serving.outlet import DIRECT, Direct
from gateway.serving.stream_relay import DROPPED

log = logging.getLogger("plumbline")

# Descriptors kept for what is not a client connection: the store, the log, upstream pools.
RESERVED_FDS = 256
LOG_EVERY_S = 10.0
# The most of a refused request's body read before its 503 (so closing does not reset it).
REFUSED_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = 10.0
    keepalive_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    send_timeout_s: float = 60.0
    max_header_bytes: int = 64 * 1024
    max_connections: int = 4096  # served; past it, answered 503
    ceiling: int = 8192  # past it, closed at once


def raise_open_files() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit (an unlimited hard
    limit: to 1,048,576); return (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, target


def limits_for(server: ServerConfig, open_files: int) -> Limits:
    """`server`'s limits, with `max_connections` fitted to `open_files`: a served connection
    may hold two descriptors (the client's and an upstream's), a refused one holds one until
    its 503 is written, and `RESERVED_FDS` stay free, so accepting never fails."""
    budget = max(open_files - RESERVED_FDS, 3)
    served = max(1, min(server.max_connections, budget // 3))
    return Limits(
        header_timeout_s=server.header_timeout_s,
        keepalive_timeout_s=server.keepalive_timeout_s,
        body_timeout_s=server.body_timeout_s,
        send_timeout_s=server.send_timeout_s,
        max_header_bytes=server.max_header_bytes,
        max_connections=served,
        ceiling=served + min(budget - 2 * served, served),
    )


def start_limits(server: ServerConfig) -> tuple[Limits, str]:
    """At start: raise the open-files limit, fit the limits to it; and the line saying so."""
    before, after = raise_open_files()
    limits = limits_for(server, after)
    raised = f" (raised from {before})" if after != before else ""
    line = f"open files limit {after}{raised}: at most {limits.max_connections} connections"
    if limits.max_connections < server.max_connections:
        line += f" (of the {server.max_connections} asked for in [server] max_connections)"
    return limits, line


class Throttle:
    """At most one log line per kind every `LOG_EVERY_S`, saying how many were left out."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.skipped: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self.last.get(kind, -LOG_EVERY_S) < LOG_EVERY_S:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            return
        skipped = self.skipped.pop(kind, 0)
        self.last[kind] = now
        more = f" ({skipped} more like it in the last {LOG_EVERY_S:g}s)" if skipped else ""
        log.warning("%s%s", message, more)


throttle = Throttle()


def _answer(status: int, reason: bytes, error: GatewayError) -> bytes:
    """A whole answer written by the connection itself (no request reached the app): it still
    names a request id, as every answer of the gateway does."""
    body = error.json()
    rid = new_id().encode()
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body),
            b"x-request-id: %s\r\nx-plumbline-request-id: %s\r\n" % (rid, rid),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class _Timeout(GatewayError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class _Busy(GatewayError):
    status = 503
    code = "too_many_connections"


async def refuse(scope: Any, receive: Any, send: Any) -> None:
    """The app of a connection past `max_connections`: a 503 (the body read first, up to
    `REFUSED_BODY_BYTES`, so that closing the connection does not reset it)."""
    read = 0
    while read <= REFUSED_BODY_BYTES:
        message = await receive()
        read += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    body = _Busy("The gateway is serving as many connections as it may; retry shortly.").json()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(b"retry-after", b"1"), (b"connection", b"close")]
    own, echoed = ids_of(scope)
    headers += [(ECHO.encode(), echoed.encode()), (OWN.encode(), own.encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_DEFAULT = Limits()


def limits_of(app: Any) -> Limits:
    """The limits the app was started with (`app.state.connection_limits`, under uvicorn's
    middleware where it wraps the app), else the defaults."""
    for _ in range(4):
        limits = getattr(getattr(app, "state", None), "connection_limits", None)
        if isinstance(limits, Limits):
            return limits
        app = getattr(app, "app", None)
    return _DEFAULT


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a proxy's limits (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits = limits_of(self.app)
        self.timeout_keep_alive = limits.keepalive_timeout_s  # type: ignore[assignment]
        self._head = 0  # bytes of the request head so far; -1 once it is complete
        self._reading: asyncio.TimerHandle | None = None  # the head's or the body's deadline
        self._sending: asyncio.TimerHandle | None = None
        self._full_since: float | None = None  # when the client's socket last filled up
        self._body_at = 0.0  # when the body last arrived

    # -- the connection ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        open_now, limits = len(self.connections), self.limits
        if open_now > limits.ceiling:
            throttle.warn("flood", f"{open_now} client connections open: one closed at once")
            transport.abort()
            return
        if open_now > limits.max_connections:
            throttle.warn(
                "busy",
                f"{open_now} client connections open, the limit is {limits.max_connections}: "
                "answered 503",
            )
            self.app = refuse
        self.timeout_keep_alive_task = self.loop.call_later(
            limits.keepalive_timeout_s, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_reading_timer()
        if self._sending is not None:
            self._sending.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head >= 0:
            self._head += len(data)
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._head > self.limits.max_header_bytes:
            self._close_with(
                431,
                b"Request Header Fields Too Large",
                HeadersTooLarge(
                    f"The request headers pass the limit of {self.limits.max_header_bytes} bytes."
                ),
                "head",
                f"a request head passed {self.limits.max_header_bytes} bytes: answered 431",
            )
            return
        # A deadline only for what a read left unfinished (a request that came whole in one
        # read makes no timer): its head, else its body.
        if self._reading is None:
            cycle = self.cycle
            if self._head > 0:
                self._reading = self.loop.call_later(self.limits.header_timeout_s, self._head_late)
            elif self._head < 0 and cycle is not None and cycle.more_body:
                self._reading = self.loop.call_later(self.limits.body_timeout_s, self._body_late)

    # -- the request's head and body -----------------------------------------------------------
    def on_headers_complete(self) -> None:
        self._head = -1
        self._stop_reading_timer()
        self._body_at = self.loop.time()
        super().on_headers_complete()
        cycle = self.cycle
        # (An upgrade makes no cycle; an answer to HEAD writes no body.)
        if cycle is not None and cycle.scope is self.scope and self.scope["method"] != "HEAD":
            scope: Any = self.scope  # (a TypedDict to mypy; the app reads DIRECT from it)
            scope[DIRECT] = (cycle.send, Direct(body_writer(cycle, self.flow), corker(cycle)))

    def on_body(self, body: bytes) -> None:
        self._body_at = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._stop_reading_timer()
        self._head = 0
        super().on_message_complete()

    def _stop_reading_timer(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None

    def _head_late(self) -> None:
        self._reading = None
        if self._head > 0 and not self.transport.is_closing():
            s = self.limits.header_timeout_s
            self._close_with(
                408,
                b"Request Timeout",
                _Timeout(f"The request head was not complete within {s:g}s."),
                "slow-head",
                f"a request head was not complete within {s:g}s: answered 408",
            )

    def _body_late(self) -> None:
        self._reading = None
        cycle, s = self.cycle, self.limits.body_timeout_s
        if cycle is None or not cycle.more_body or self.transport.is_closing():
            return
        waited = self.loop.time() - self._body_at
        if self.flow.read_paused or waited < s:  # the app is not reading yet, or it came since
            self._reading = self.loop.call_later(s - waited if waited < s else s, self._body_late)
            return
        message = f"a request body stopped for {s:g}s"
        if cycle.response_started:
            throttle.warn("slow-body", message + ": connection closed")
            self.transport.close()
            return
        error = _Timeout(f"The request body stopped arriving for {s:g}s.")
        self._close_with(408, b"Request Timeout", error, "slow-body", message + ": answered 408")

    def _close_with(
        self, status: int, reason: bytes, error: GatewayError, kind: str, line: str
    ) -> None:
        throttle.warn(kind, line)
        self.transport.write(_answer(status, reason, error))
        self.transport.close()

    # -- the answer --------------------------------------------------------------------------
    def pause_writing(self) -> None:
        # A full socket may come and go many times a second: no timer is made or cancelled
        # each time; one, armed at most once a `send_timeout_s`, looks at when it last filled.
        super().pause_writing()
        self._full_since = self.loop.time()
        if self._sending is None:
            self._sending = self.loop.call_later(self.limits.send_timeout_s, self._send_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._full_since = None

    def _send_late(self) -> None:
        self._sending = None
        since = self._full_since
        if since is None or self.transport.is_closing():
            return
        s = self.limits.send_timeout_s
        waited = self.loop.time() - since
        if waited < s:  # it emptied and filled again since
            self._sending = self.loop.call_later(s - waited, self._send_late)
            return
        scope: Any = self.scope  # (a TypedDict to mypy; the app reads DROPPED from it)
        path = scope.get("path", "?") if scope else "?"
        if scope is not None:
            scope[DROPPED] = "SendTimeout"
        throttle.warn("send", f"a client left its answer on {path} unread for {s:g}s: dropped")
        self.transport.abort()  # its app sees `http.disconnect`: a relay stops its upstream
