"""The relay: from an opened upstream response to the client, with taps watching.

Streams are relayed block by block, from the upstream connection's callback straight to the
client's socket; the tap parses events for accounting and rewrites only what must change. If the
upstream breaks after the first byte was sent, the stream ends with an OpenAI-style error event —
the gateway never switches upstream mid-answer. Every request, however it ends, produces exactly
one record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import AllUpstreamsFailed, GatewayError, sse_error_event
from gateway.serving import responses_tap
from gateway.serving.accounting import (
    MalformedStream,
    UpstreamStreamError,
    prompt_estimate,
    tap_body,
    tap_embeddings,
)
from gateway.serving.dispatch import Call
from gateway.serving.engine import HEADER as ENGINE_HEADER
from gateway.serving.outlet import Outlet
from gateway.serving.tap import StreamTap
from gateway.serving.upstream import Opened, sanitise
from gateway.trust.capture import Capture

if TYPE_CHECKING:
    from gateway.edge.app import Gateway
    from gateway.trust.shadow import Pending


log = logging.getLogger("plumbline")

WATCH_AFTER_S = 0.05


def _think_mode(gw: Gateway, call: Call, opened: Opened) -> tuple[bool, bool]:
    """(split every content token, the template opened <think> in the prompt)."""
    if not call.chat or opened.upstream.reasoning != "gateway":
        return False, False
    profile = gw.config.profile_for(call.model)
    kwargs = call.body.get("chat_template_kwargs") or {}
    thinking = kwargs.get("enable_thinking", profile.thinking if profile else None)
    opened_in_prompt = bool(profile and profile.think_in_prompt and thinking is not False)
    return True, opened_in_prompt


def _headers(gw: Gateway, call: Call, opened: Opened) -> dict[str, str]:
    record = call.record
    headers = {
        "x-plumbline-request-id": record.request_id,
        "x-plumbline-upstream": opened.upstream.name,
    }
    if record.engine is not None:
        headers[ENGINE_HEADER] = record.engine
    if record.provider:
        headers["x-plumbline-provider"] = record.provider
    if record.params_hash:
        headers["x-plumbline-params-hash"] = record.params_hash
    if record.dropped:
        # Imported here: gateway.edge.doors imports its router, which imports the API that imports
        # this module.
        from gateway.edge.doors.policy import HEADER as DROPPED_HEADER

        headers[DROPPED_HEADER] = record.dropped
    if record.clamped:
        headers["x-plumbline-clamped"] = record.clamped  # gateway/serving/adapt.py
    return headers


async def respond(
    gw: Gateway, call: Call, disconnected: Callable[[], Awaitable[None]] | None = None
) -> Response:
    """Answer the client; errors before the first byte are raised.

    A non-streamed request is abandoned when `disconnected()` returns first (the client went
    away): the upstream request is closed so the engine stops generating for nobody. A watcher
    task cancels this one; it is started only once the answer has taken `WATCH_AFTER_S`, so the
    many quick answers never pay for a task (a client gone sooner is noticed then)."""
    if call.stream or disconnected is None:
        return await _respond(gw, call)
    me = asyncio.current_task()
    assert me is not None
    gone = False
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal gone
        await disconnected()
        gone = True
        me.cancel()

    def start() -> None:
        nonlocal watcher
        watcher = loop.create_task(watch())

    loop = asyncio.get_running_loop()
    later = loop.call_later(WATCH_AFTER_S, start)
    try:
        return await _respond(gw, call)
    except asyncio.CancelledError:
        if not gone:
            raise
        me.uncancel()
    finally:
        later.cancel()
        if watcher is not None:
            watcher.cancel()
    record = call.record
    if record.status == 0:
        record.status = 499
        record.error_class = "ClientDisconnected"
        gw.finish(record)
    return Response(status_code=499)


async def _respond(gw: Gateway, call: Call) -> Response:
    pending = gw.shadow.consider(call.model, call.path, call.body, call.record)
    capture = (
        None
        if call.path == "/embeddings"
        else gw.sampler.start(call.record, call.body, always=pending is not None)
    )
    try:
        opened = await gw.dispatcher.open(call)
    except GatewayError as e:
        call.record.status = e.status
        call.record.error_class = type(e).__name__
        if pending is not None:
            gw.shadow.primary_done(pending, call.record, None)
        gw.finish(call.record)
        raise
    if call.stream:
        return StreamRelay(gw, call, opened, capture, pending)
    return _whole(gw, call, opened, capture, pending)


def _observed(gw: Gateway, call: Call, capture: Capture | None, pending: Pending | None) -> None:
    """The answer is complete: set the capture's flags and hand it to the shadow pairing."""
    if capture is not None:
        capture.finish()
    if pending is not None:
        gw.shadow.primary_done(pending, call.record, capture)


def _whole(
    gw: Gateway,
    call: Call,
    opened: Opened,
    capture: Capture | None = None,
    pending: Pending | None = None,
) -> Response:
    record = call.record
    split, opened_in_prompt = _think_mode(gw, call, opened)
    answered: Answered | None = None
    try:
        if call.path == "/embeddings":
            body = tap_embeddings(record, opened.first)
        elif opened.native:
            body = responses_tap.tap_whole(record, opened.first)
        else:
            body = tap_body(
                record,
                opened.first,
                parsed=opened.parsed,
                split_think=split,
                opened_in_prompt=opened_in_prompt,
                chat=call.chat,
                capture=capture,
                model=call.body.get("model") or call.model,  # the name asked (an alias too)
            )
        record.status = 200
        record.ttft_s = record.ttfa_s = record.e2e_s
        headers = _headers(gw, call, opened)
        if call.translator is not None and not opened.native:
            body = call.translator.whole(orjson.loads(body))
        if record.truncated:
            headers["x-plumbline-truncated"] = "length"
        if record.reasoning_leak:
            headers["x-plumbline-reasoning-leak"] = "true"
        gw.price(record)
        if record.cost_usd is not None:
            headers["x-plumbline-cost-usd"] = f"{record.cost_usd:.8f}"
        answered = Answered(body, headers, lambda: gw.finish(record))
        return answered
    except MalformedStream as e:
        record.status = 502
        record.error_class = "MalformedStream"
        raise AllUpstreamsFailed(str(e)) from None
    finally:
        opened.response.release()
        gw.pool.end(opened.upstream.name)
        _observed(gw, call, capture, pending)
        if answered is None:
            gw.finish(record)


class Answered(Response):
    """A whole answer whose record goes to the sinks (metrics, watchdog, store) once the answer
    is written: the client does not wait for them (`bench/gateway_perf.py`: about 60 µs a
    request at one client)."""

    media_type = "application/json"

    def __init__(self, body: bytes, headers: dict[str, str], finish: Callable[[], None]):
        super().__init__(body, headers=headers)
        self.finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.finish()


class StreamRelay(Response):
    """A relayed stream, as an ASGI response.

    Dispatch has read the first block; the rest arrive as callbacks from the upstream
    connection (`Reply.pipe`), each one tapped, translated for the front door when it speaks
    another API, and written to the client by the `Outlet` in the same callback. The task that
    serves the request sleeps until the stream ends; a watcher task notices the client leaving.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        gw: Gateway,
        call: Call,
        opened: Opened,
        capture: Capture | None,
        pending: Pending | None,
    ):
        self.status_code = 200
        self.background = None
        first = opened.parsed
        if isinstance(first, dict) and isinstance(first.get("provider"), str):
            # OpenRouter names the provider on every chunk: the first one is in hand already.
            call.record.provider = first["provider"]
        self.init_headers({**_headers(gw, call, opened), "cache-control": "no-cache"})
        self.gw = gw
        self.call = call
        self.opened = opened
        self.capture = capture
        self.pending = pending
        split, opened_in_prompt = _think_mode(gw, call, opened)
        self.tap: StreamTap | responses_tap.ResponsesStreamTap
        if opened.native:
            self.tap = responses_tap.ResponsesStreamTap(call.record)
        else:
            self.tap = StreamTap(
                call.record,
                client_wants_usage=call.client_wants_usage,
                split_think=split,
                opened_in_prompt=opened_in_prompt,
                chat=call.chat,
                capture=capture,
                model=call.body.get("model") or call.model,  # the name asked (an alias too)
                prompt_tokens=lambda: prompt_estimate(call.body),
            )
        self.translator = None if opened.native else call.translator
        self.outlet: Outlet | None = None
        self.ended: asyncio.Future[None] | None = None
        self.watched = gw.silence.watch(opened.response)
        self.gone = False
        self.closed = False
        call.record.status = 200

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        reply = self.opened.response
        self.ended = loop.create_future()
        self.outlet = Outlet(send, reply.pause, reply.resume)
        watcher = loop.create_task(self._watch(receive))
        beat = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            self._data(self.opened.first)
            # A door that keeps a silent stream alive (the Responses door's heartbeats).
            heartbeats = getattr(self.translator, "heartbeats", None)
            if heartbeats is not None and not self.ended.done():
                beat = loop.create_task(heartbeats(self._beat))
            if not self.ended.done():
                reply.pipe(self._data, self._end, self._broken)
            await self.ended
            await self.outlet.drained()
        except asyncio.CancelledError:
            self._left()  # the server is stopping, or the request was cancelled
            raise
        finally:
            watcher.cancel()
            if beat is not None:
                beat.cancel()
            self._close()

    def _beat(self, data: bytes) -> None:
        if not (self.gone or self.closed or (self.ended is not None and self.ended.done())):
            self._write(data, True)

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._left()

    # -- callbacks from the upstream connection --------------------------------------------
    def _data(self, block: bytes) -> None:
        self.watched.seen = perf_counter()
        try:
            out = self.tap.feed(block)
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
            self._write(out, True)

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
        name = self.opened.upstream.name
        record.error_class = type(error).__name__
        record.status = error.status if isinstance(error, UpstreamStreamError) else 502
        if isinstance(error, TimeoutError):
            message = f"upstream {name} went silent mid-stream"
        elif isinstance(error, UpstreamStreamError):
            message = f"upstream {name}: {sanitise(str(error), self.opened.upstream)}"
        elif isinstance(error, MalformedStream):
            message = f"upstream {name}: {error}"
        elif isinstance(error, OSError):
            message = f"upstream {name} broke the stream ({type(error).__name__})"
        else:
            message = "the gateway failed while relaying this stream; it has been logged"
        self.gw.pool.failed(name)
        self.opened.response.close()
        partial = error.partial if isinstance(error, MalformedStream) else b""
        out = partial + self.tap.abort() + sse_error_event(AllUpstreamsFailed(message))
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

    def _left(self) -> None:
        """The client went away: stop the upstream (the engine stops generating for nobody)."""
        if self.gone or self.closed or (self.ended is not None and self.ended.done()):
            return
        self.gone = True
        record = self.call.record
        record.status = 499
        record.error_class = "ClientDisconnected"
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
        gw, record = self.gw, self.call.record
        gw.silence.forget(self.watched)
        if not self.tap.done and record.e2e_s is None:
            self.tap.abort()
        self.opened.response.release()
        gw.pool.end(self.opened.upstream.name)
        _observed(gw, self.call, self.capture, self.pending)
        gw.finish(record)
