"""A relayed stream: from the upstream connection's callbacks to the client's socket.

Streams are relayed block by block, from the upstream connection's callback straight to the
client's socket; the tap parses events for accounting and rewrites only what must change. If the
upstream breaks after the first byte was sent, the stream ends with an OpenAI-style error event —
the gateway never switches upstream mid-answer.

A stream is complete only when the upstream said so (a finish reason or `[DONE]`; a Responses
stream's last event): one that ends before, however cleanly at the HTTP level, is an upstream
cut, and ends with an error event too. So does a stream the graceful shutdown's limit ends
(`GatewayShutdown`, recorded as a 503).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, NoReturn

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import (
    AllUpstreamsFailed,
    GatewayError,
    GatewayShutdown,
    MalformedStream,
    UpstreamCut,
    UpstreamStreamError,
    WireError,
)
from gateway.serving.outlet import Outlet, direct_of
from gateway.serving.redaction import Redactor
from gateway.serving.upstream import Opened

# The scope's key for why the server dropped the client, where it did (gateway/edge/connection.py
# sets it: "SendTimeout"); the record's error_class, instead of "ClientDisconnected".
DROPPED = "plumbline.dropped"

if TYPE_CHECKING:
    from gateway.config import Upstream
    from gateway.serving.call import Call, Translator
    from gateway.serving.pool import Pool
    from gateway.serving.responses_tap import ResponsesStreamTap
    from gateway.serving.silence import Silence, Watched
    from gateway.serving.tap import StreamTap

log = logging.getLogger("plumbline")

SHUTDOWN = "the gateway is shutting down: this stream was ended before the upstream finished it"


class StreamRelay(Response):
    """A relayed stream, as an ASGI response.

    Its blocks arrive as callbacks from the upstream connection (`Reply.pipe`), each one tapped,
    translated for the front door when it speaks another API, and written to the client by the
    `Outlet` in the same callback. The task that serves the request sleeps until the stream
    ends; a watcher task notices the client leaving.

    It begins one of two ways. Served by the edge (the server's `send` is in the call), it is
    the call's `Head` (`gateway/serving/call.py`): its tap is made while the upstream prefills
    (`prepare`), and dispatch hands it the checked first event in the callback that brought it
    (`begin`), which writes the head and that event at once. Otherwise (`stream_head =
    "at_once"`, or no `send` in hand) dispatch returns the opened stream, `bind` takes it, and
    the head goes when the server calls the response.
    """

    media_type = "text/event-stream"
    # Set by `bind`, before any block is relayed.
    opened: Opened
    tap: StreamTap | ResponsesStreamTap
    watched: Watched

    def __init__(
        self,
        call: Call,
        *,
        taps: Callable[[Upstream, bool], StreamTap | ResponsesStreamTap],
        headers: Callable[[Opened], dict[str, str]],
        pool: Pool,
        silence: Silence,
        done: Callable[[], None],
        ttft_s: float | None = None,
        redact: Callable[[str], str] | None = None,
    ):
        """`taps`: a tap for an upstream (and whether it is relayed natively); `headers`: the
        gateway's headers for an opened stream. `done`: the answer has ended and the upstream is
        freed, called once: the record is complete (the relay hands it on). `ttft_s`: how long
        the first event may take when dispatch did not wait for it (`stream_head = "at_once"`);
        the silence limit if None. `redact`: what upstream error text goes through before the
        client sees it (`gateway/serving/redaction.py`: the config's; by default the patterns
        alone)."""
        self.status_code = 200
        self.background = None
        self.call = call
        self.taps = taps
        self.headers_of = headers
        self.pool = pool
        self.silence = silence
        self.done = done
        self.ttft_s = silence.limit_s if ttft_s is None else ttft_s
        self.redact = redact or Redactor().text
        # `prepare`'s tap, and the attempt it was made for (its upstream, relayed natively).
        self.prepared: tuple[str, bool, StreamTap | ResponsesStreamTap] | None = None
        self.translator: Translator | None = None
        self.outlet: Outlet | None = None
        self.ended: asyncio.Future[None] | None = None
        self.waiting = False
        self.begun = False  # the head has gone to the client (or is going)
        self.gone = False
        self.closed = False

    # -- the call's head (dispatch) --------------------------------------------------------
    def prepare(self, upstream: Upstream, native: bool) -> None:
        """An attempt's request is written: its tap, made while the upstream prefills."""
        self.prepared = (upstream.name, native, self.taps(upstream, native))

    def begin(self, opened: Opened) -> None:
        """The attempt's first event is checked: the head and that event go to the client now
        (in the upstream connection's callback), and the rest are relayed as they come."""
        send = self.call.send
        assert send is not None
        self.bind(opened)
        reply = opened.response
        self.ended = asyncio.get_running_loop().create_future()
        self.outlet = Outlet(send, reply.pause, reply.resume, self.call.direct)
        self._start()

    def abandon(self) -> None:
        """The request was cancelled after `begin`, before the server called the response: the
        server is stopping (a client that leaves is noticed by `_watch`)."""
        self._stopped()
        self._close()

    def bind(self, opened: Opened) -> None:
        """The opened stream this relays (the tap made for its upstream, if `prepare` was not)."""
        self.opened = opened
        prepared = self.prepared
        if prepared is not None and prepared[:2] == (opened.upstream.name, opened.native):
            self.tap = prepared[2]
        else:
            self.tap = self.taps(opened.upstream, opened.native)
        self.translator = None if opened.native else self.call.translator
        self.init_headers({**self.headers_of(opened), "cache-control": "no-cache"})
        # A head sent before the first event (`stream_head = "at_once"`): that event may take
        # what dispatch would have waited for it.
        self.waiting = not opened.first
        self.watched = self.silence.watch(opened.response, self.ttft_s if self.waiting else None)
        self.call.record.status = 200

    def _start(self) -> None:
        """The head, the first block if dispatch read one, then the rest as they come."""
        assert self.outlet is not None and self.ended is not None
        self.begun = True
        uncork = self.outlet.corked()  # the head and what follows at once: one write
        try:
            self.outlet.start(200, self.raw_headers)
            if self.outlet.error is not None:
                self._left()
                return
            if self.opened.first:
                self._data(self.opened.first)
            if not self.ended.done():
                self.opened.response.pipe(self._data, self._end, self._broken)
        finally:
            uncork()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        if not self.begun:
            reply = self.opened.response
            self.ended = loop.create_future()
            self.outlet = Outlet(send, reply.pause, reply.resume, direct_of(scope, send))
        assert self.ended is not None and self.outlet is not None
        watcher = loop.create_task(self._watch(receive, scope))
        beat = None
        try:
            if not self.begun:
                self._start()
            # A door that keeps a silent stream alive (the Responses door's heartbeats).
            heartbeats = getattr(self.translator, "heartbeats", None)
            if heartbeats is not None and not self.ended.done():
                beat = loop.create_task(heartbeats(self._beat))
            await self.ended
            await self.outlet.drained()
        except asyncio.CancelledError:
            if self.gone or self.closed or (self.ended.done() and not self.ended.cancelled()):
                raise
            # A cancellation while awaiting `ended` cancelled it: that is no end of the stream.
            self.ended = loop.create_future()
            # The server's graceful shutdown ran out of time (a client that leaves is noticed by
            # `_watch`): the stream ends with an error event, its record says why.
            self._stopped()
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            watcher.cancel()
            if beat is not None:
                beat.cancel()
            self._close()

    def _beat(self, data: bytes) -> None:
        if not (self.gone or self.closed or (self.ended is not None and self.ended.done())):
            self._write(data, True)

    async def _watch(self, receive: Receive, scope: Scope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        # Why, where the server dropped the client itself (gateway/edge/connection.py).
        self._left(scope.get(DROPPED, "ClientDisconnected"))

    # -- callbacks from the upstream connection --------------------------------------------
    def _data(self, block: bytes) -> None:
        # One clock read a block: the silence watch's and the tap's (TTFT, inter-token gaps).
        self.watched.seen = now = perf_counter()
        try:
            out = self.tap.feed(block, now)
            if out and self.translator is not None:
                out = self.translator.feed(out)
        except MalformedStream as e:
            self._broken(e)
            return
        except Exception as e:  # a fault of ours: end this stream, keep the connection sane
            log.exception("stream relay failed")
            self._broken(e)
            return
        if out:
            outlet = self.outlet  # `_write`, in place: this runs for every block
            assert outlet is not None
            outlet.write(out, True)
            if outlet.error is not None:
                self._left()
        if self.tap.unlearnt is not None:  # the first token is written: now the tap studies it
            self.tap.learn()

    def _end(self) -> None:
        try:
            out = self.tap.finish()
            if self.translator is not None:
                out = self.translator.feed(out)
        except MalformedStream as e:
            self._broken(e)
            return
        self._finish(out)

    def _broken(self, error: BaseException) -> None:
        """The upstream failed after the first byte: close the stream with an error event (the
        gateway never switches upstream mid-answer)."""
        if self.gone or self.ended is None or self.ended.done():
            return
        record = self.call.record
        record.error_class = type(error).__name__
        record.status = error.status if isinstance(error, UpstreamStreamError) else 502
        # Ended before the upstream said it finished, and not by an error it reported: cut.
        record.truncated = record.truncated or isinstance(error, UpstreamCut | WireError)
        message = self._said(error)
        self.pool.failed(self.opened.upstream.name)
        self._end_with(AllUpstreamsFailed(message), error)

    def _said(self, error: BaseException) -> str:
        """What the client is told of the upstream's failure (its configured name only)."""
        name = self.opened.upstream.name
        if isinstance(error, TimeoutError):
            first = self.waiting and self.call.record.chunks == 0
            said = f"sent no first event within {self.ttft_s:g}s" if first else None
            return f"upstream {name} {said or 'went silent mid-stream'}"
        if isinstance(error, UpstreamCut):
            said = str(error).removeprefix("the upstream ")
        elif isinstance(error, UpstreamStreamError):
            said = f": {self.redact(str(error))}"
        elif isinstance(error, MalformedStream):
            said = f": {error}"
        elif isinstance(error, OSError):
            said = f"broke the stream ({type(error).__name__})"
        else:
            return "the gateway failed while relaying this stream; it has been logged"
        return f"upstream {name}{'' if said.startswith(':') else ' '}{said}"

    def _stopped(self) -> None:
        """The server is stopping and its graceful shutdown ran out of time: the stream ends with
        an error event, the record says so (503 `GatewayShutdown`, not a success)."""
        if self.gone or self.closed or (self.ended is not None and self.ended.done()):
            return
        record = self.call.record
        error = GatewayShutdown(SHUTDOWN)
        record.status, record.error_class = error.status, type(error).__name__
        if self.outlet is None or not self.begun:  # nothing reached the client: a record only
            self.tap.abort()
            self._close()
            return
        self._end_with(error, None)

    def _end_with(self, error: GatewayError, cause: BaseException | None) -> None:
        """The client gets what was held, then `error` as the stream's last event (in its door's
        shape); the upstream's connection is closed with the record (`_close`: not `close`,
        whose own error would come back here)."""
        partial = cause.partial if isinstance(cause, MalformedStream) else b""
        out = partial + self.tap.abort() + self.tap.error_event(error)
        if self.translator is not None:
            out = self.translator.feed(out)
        self._finish(out)

    def _finish(self, last: bytes) -> None:
        """The record is complete: hand it on before the client can see the stream's end."""
        self._close()
        self._write(last, False)
        self._settle()

    # -- the client's side -----------------------------------------------------------------
    def _write(self, data: bytes, more: bool) -> None:
        assert self.outlet is not None
        self.outlet.write(data, more)
        if self.outlet.error is not None:
            self._left()

    def _left(self, why: str = "ClientDisconnected") -> None:
        """The client went away (or was dropped, `why`): stop the upstream (the engine stops
        generating for nobody)."""
        if self.gone or self.closed or (self.ended is not None and self.ended.done()):
            return
        self.gone = True
        record = self.call.record
        record.status = 499
        record.error_class = why
        self.tap.abort()
        self.opened.response.close()
        self._settle()

    def _settle(self) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    def _close(self) -> None:
        """Exactly once, however the stream ended: free the upstream, finish the record."""
        if self.closed:
            return
        self.closed = True
        self.silence.forget(self.watched)
        if not self.tap.done and self.call.record.e2e_s is None:
            self.tap.abort()
        self.opened.response.release()
        self.pool.end(self.opened.upstream.name)
        self.done()
        # The call's head, and the closures the relay was made with, reach back to the relay:
        # a reference cycle a stream, left to the cyclic collector, otherwise.
        self.call.head = None
        self.taps = self.headers_of = self.done = _spent


def _spent(*_: object) -> NoReturn:
    raise RuntimeError("the stream has ended")
