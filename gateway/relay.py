"""The relay: from an opened upstream response to the client, with taps watching.

Streams are relayed block by block; the tap parses events for accounting and rewrites only what
must change. If the upstream breaks after the first byte was sent, the stream ends with an
OpenAI-style error event — the gateway never switches upstream mid-answer. Every request, however
it ends, produces exactly one record, handed to the sinks in `finally`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING

import aiohttp
import orjson
from starlette.responses import Response, StreamingResponse

from gateway import responses_tap
from gateway.dispatch import Call, Translator
from gateway.errors import AllUpstreamsFailed, GatewayError, sse_error_event
from gateway.tap import MalformedStream, StreamTap, tap_body, tap_embeddings
from gateway.upstream import Opened
from gateway.watchdog import Capture

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.shadow import Pending


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


def _headers(call: Call, opened: Opened) -> dict[str, str]:
    record = call.record
    headers = {
        "x-plumbline-request-id": record.request_id,
        "x-plumbline-upstream": opened.upstream.name,
    }
    if record.provider:
        headers["x-plumbline-provider"] = record.provider
    if record.params_hash:
        headers["x-plumbline-params-hash"] = record.params_hash
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
        body = _stream(gw, call, opened, capture, pending)
        if call.translator is not None and not opened.native:
            body = _translated(call.translator, body)
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={**_headers(call, opened), "cache-control": "no-cache"},
        )
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
    try:
        if call.path == "/embeddings":
            body = tap_embeddings(record, opened.first)
        elif opened.native:
            body = responses_tap.tap_whole(record, opened.first)
        else:
            body = tap_body(
                record,
                opened.first,
                split_think=split,
                opened_in_prompt=opened_in_prompt,
                chat=call.chat,
                capture=capture,
            )
        record.status = 200
        record.ttft_s = record.ttfa_s = record.e2e_s
        headers = _headers(call, opened)
        if call.translator is not None and not opened.native:
            body = call.translator.whole(orjson.loads(body))
        if record.truncated:
            headers["x-plumbline-truncated"] = "length"
        if record.reasoning_leak:
            headers["x-plumbline-reasoning-leak"] = "true"
        gw.price(record)
        if record.cost_usd is not None:
            headers["x-plumbline-cost-usd"] = f"{record.cost_usd:.8f}"
        return Response(body, media_type="application/json", headers=headers)
    except MalformedStream as e:
        record.status = 502
        record.error_class = "MalformedStream"
        raise AllUpstreamsFailed(str(e)) from None
    finally:
        opened.response.release()
        gw.pool.end(opened.upstream.name)
        _observed(gw, call, capture, pending)
        gw.finish(record)


async def _stream(
    gw: Gateway,
    call: Call,
    opened: Opened,
    capture: Capture | None = None,
    pending: Pending | None = None,
) -> AsyncIterator[bytes]:
    record = call.record
    split, opened_in_prompt = _think_mode(gw, call, opened)
    tap: StreamTap | responses_tap.ResponsesStreamTap
    if opened.native:
        tap = responses_tap.ResponsesStreamTap(record)
    else:
        tap = StreamTap(
            record,
            client_wants_usage=call.client_wants_usage,
            split_think=split,
            opened_in_prompt=opened_in_prompt,
            chat=call.chat,
            capture=capture,
        )
    record.status = 200
    watched = gw.silence.watch(opened.response)
    try:
        out = tap.feed(opened.first)
        if out:
            yield out
        async for block in opened.response.content.iter_any():
            watched.seen = perf_counter()
            out = tap.feed(block)
            if out:
                yield out
        yield tap.finish()
    except (TimeoutError, MalformedStream, aiohttp.ClientError, OSError) as e:
        record.error_class = type(e).__name__
        record.status = 502
        if isinstance(e, asyncio.TimeoutError):
            message = f"upstream {opened.upstream.name} went silent mid-stream"
        elif isinstance(e, MalformedStream):
            message = f"upstream {opened.upstream.name}: {e}"
        else:
            message = f"upstream {opened.upstream.name} broke the stream ({type(e).__name__})"
        gw.pool.failed(opened.upstream.name)
        partial = e.partial if isinstance(e, MalformedStream) else b""
        yield partial + tap.abort() + sse_error_event(AllUpstreamsFailed(message))
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away (cancelled while waiting for the upstream, or closed by the
        # edge while the block was being sent).
        record.status = 499
        record.error_class = "ClientDisconnected"
        tap.abort()
        raise
    finally:
        gw.silence.forget(watched)
        if not tap.done and record.e2e_s is None:
            tap.abort()
        opened.response.release()
        gw.pool.end(opened.upstream.name)
        _observed(gw, call, capture, pending)
        gw.finish(record)


async def _translated(translator: Translator, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Chat SSE from the relay, rendered in the front door's own stream format."""
    async for block in body:
        out = translator.feed(block)
        if out:
            yield out
