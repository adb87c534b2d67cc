"""The relay: from a dispatched call to the client, with taps watching.

`Relay.respond` opens the call through dispatch (errors before the first byte are raised) and
answers the client: a whole answer tapped at once (`Answered`), a stream relayed block by block
(`gateway/serving/stream_relay.py`). The relay is given only what it uses: dispatch's `open`,
the upstream pool, the silence sweep, the text sampler, the shadow mirror, the route profiles,
and the record's pricing and its sinks (`finish`). Every request, however it ends, produces
exactly one record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import AllUpstreamsFailed, GatewayError, GatewayShutdown, MalformedStream
from gateway.ledger.record import Record
from gateway.serving import responses_tap
from gateway.serving.accounting import prompt_estimate, tap_body, tap_embeddings
from gateway.serving.call import Call
from gateway.serving.dropped import HEADER as DROPPED_HEADER
from gateway.serving.engine import HEADER as ENGINE_HEADER
from gateway.serving.hooks import AnswerSink, Mirror, Mirrored, Sampler
from gateway.serving.stream_relay import StreamRelay
from gateway.serving.tap import StreamTap
from gateway.serving.upstream import Opened

if TYPE_CHECKING:
    from gateway.config import Profile, Upstream
    from gateway.serving.pool import Pool
    from gateway.serving.silence import Silence


WATCH_AFTER_S = 0.05


class Relay:
    """Answers the client for a call: dispatches it, taps the answer, finishes the record."""

    def __init__(
        self,
        *,
        open: Callable[[Call], Awaitable[Opened]],
        profile_for: Callable[[str], Profile | None],
        pool: Pool,
        silence: Silence,
        sampler: Sampler,
        shadow: Mirror,
        price: Callable[[Record], None],
        finish: Callable[[Record], None],
        ttft_s: float | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.open = open  # dispatch: the opened upstream response, or an error before it
        self.profile_for = profile_for
        self.pool = pool
        self.silence = silence
        self.sampler = sampler
        self.shadow = shadow
        self.price = price  # the record's cost
        self.finish = finish  # the record to every sink; never raises
        self.ttft_s = ttft_s  # a stream's wait for its first event, once its head has gone
        self.redact = redact  # upstream error text, before a client sees it (the relay's own)

    async def respond(
        self, call: Call, disconnected: Callable[[], Awaitable[None]] | None = None
    ) -> Response:
        """Answer the client; errors before the first byte are raised.

        A non-streamed request is abandoned when `disconnected()` returns first (the client
        went away): the upstream request is closed so the engine stops generating for nobody.
        A watcher task cancels this one; it is started only once the answer has taken
        `WATCH_AFTER_S`, so the many quick answers never pay for a task (a client gone sooner is
        noticed then).

        Any other cancellation is the server's graceful shutdown running out of time: a stream
        that has begun has ended with an error event (`StreamRelay.abandon`) and is returned;
        otherwise the record says so and `GatewayShutdown` (503) is raised."""
        try:
            if call.stream or disconnected is None:
                return await self._respond(call)
            return await self._watched(call, disconnected)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            head = call.head
            if isinstance(head, StreamRelay) and head.begun:
                return head
            error = GatewayShutdown("the gateway is shutting down: the request was not answered")
            record = call.record
            if record.status == 0:  # not finished yet
                record.status, record.error_class = error.status, type(error).__name__
                self.finish(record)
            raise error from None

    async def _watched(self, call: Call, disconnected: Callable[[], Awaitable[None]]) -> Response:
        """A non-streamed answer, abandoned when the client leaves first (`respond`)."""
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
            return await self._respond(call)
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
            self.finish(record)
        return Response(status_code=499)

    async def _respond(self, call: Call) -> Response:
        answer = _Answer()
        call.defer(lambda: self._watch(call, answer))
        if call.stream:  # its relay, made while the upstream reads the request
            call.defer(lambda: self._relay(call, answer))
        try:
            try:
                opened = await self.open(call)
            finally:  # run as the request was written (`Dispatcher._attempt`), or run now
                call.flush()
        except GatewayError as e:
            call.record.status = e.status
            call.record.error_class = type(e).__name__
            if answer.pending is not None:
                self.shadow.primary_done(answer.pending, call.record, None)
            if answer.capture is not None:
                answer.capture.answered(e.json(), failed=True)
            self.finish(call.record)
            raise
        relay = answer.relay
        if relay is None:
            return self._whole(call, opened, answer.capture, answer.pending)
        if not relay.begun:  # dispatch did not begin it (`stream_head = "at_once"`, no `send`)
            relay.bind(opened)
        return relay

    def _watch(self, call: Call, answer: _Answer) -> None:
        """The shadow's mirror and the text sample: while the request is sent."""
        answer.pending = self.shadow.consider(call.model, call.path, call.body, call.record)
        if call.path != "/embeddings":
            answer.capture = self.sampler.start(
                call.record, call.body, always=answer.pending is not None, prompt=call.prompt
            )

    def _relay(self, call: Call, answer: _Answer) -> None:
        """A stream's relay; the call's head when the server's `send` is in hand (dispatch then
        begins it from the first event's callback)."""

        def done() -> None:
            self.observed(call, answer.capture, answer.pending)
            self.finish(call.record)

        relay = answer.relay = StreamRelay(
            call,
            taps=lambda upstream, native: self._tap(call, upstream, native, answer.capture),
            headers=lambda opened: self._stream_headers(call, opened),
            pool=self.pool,
            silence=self.silence,
            done=done,
            ttft_s=self.ttft_s,
            redact=self.redact,
        )
        if call.send is not None:
            call.head = relay

    def observed(self, call: Call, capture: AnswerSink | None, pending: Mirrored | None) -> None:
        """The answer is complete: set the capture's flags and hand it to the shadow pairing."""
        if capture is not None:
            capture.finish()
        if pending is not None:
            self.shadow.primary_done(pending, call.record, capture)

    def _think_mode(self, call: Call, upstream: Upstream) -> tuple[bool, bool]:
        """(split every content token, the template opened <think> in the prompt)."""
        if not call.chat or upstream.reasoning != "gateway":
            return False, False
        profile = self.profile_for(call.model)
        kwargs = call.body.get("chat_template_kwargs") or {}
        thinking = kwargs.get("enable_thinking", profile.thinking if profile else None)
        opened_in_prompt = bool(profile and profile.think_in_prompt and thinking is not False)
        return True, opened_in_prompt

    def _tap(
        self, call: Call, upstream: Upstream, native: bool, capture: AnswerSink | None
    ) -> StreamTap | responses_tap.ResponsesStreamTap:
        """A stream's tap, for the upstream it is relayed from."""
        if native:
            return responses_tap.ResponsesStreamTap(call.record, capture)
        return StreamTap(
            call.record,
            client_wants_usage=call.client_wants_usage,
            prompt_tokens=lambda: prompt_estimate(call.body),
            **self._tapping(call, upstream, capture),
        )

    def _tapping(
        self, call: Call, upstream: Upstream, capture: AnswerSink | None
    ) -> dict[str, Any]:
        """What a chat or completions tap, streamed or whole, is told of the call."""
        split, opened_in_prompt = self._think_mode(call, upstream)
        return {
            "split_think": split,
            "opened_in_prompt": opened_in_prompt,
            "chat": call.chat,
            "capture": capture,
            "model": call.body.get("model") or call.model,  # the name asked (an alias too)
        }

    @staticmethod
    def _stream_headers(call: Call, opened: Opened) -> dict[str, str]:
        first = opened.parsed
        if isinstance(first, dict) and isinstance(first.get("provider"), str):
            # OpenRouter names the provider on every chunk: the first one is in hand already.
            call.record.provider = first["provider"]
        return answer_headers(call.record, opened, call.client_request_id)

    def _whole(
        self,
        call: Call,
        opened: Opened,
        capture: AnswerSink | None = None,
        pending: Mirrored | None = None,
    ) -> Response:
        record = call.record
        answered: Answered | None = None
        try:
            body = self._tapped(call, opened, capture)
            record.status = 200
            record.ttft_s = record.ttfa_s = record.e2e_s
            headers = answer_headers(record, opened, call.client_request_id)
            if call.translator is not None and not opened.native:
                body = call.translator.whole(orjson.loads(body))
            if capture is not None:
                capture.answered(body)
            if record.truncated:
                headers["x-plumbline-truncated"] = "length"
            if record.reasoning_leak:
                headers["x-plumbline-reasoning-leak"] = "true"
            self.price(record)
            if record.cost_usd is not None:
                headers["x-plumbline-cost-usd"] = f"{record.cost_usd:.8f}"
            answered = Answered(body, headers, lambda: self.finish(record))
            return answered
        except MalformedStream as e:
            record.status = 502
            record.error_class = "MalformedStream"
            error = AllUpstreamsFailed(str(e))
            if capture is not None:
                capture.answered(error.json())
            raise error from None
        finally:
            opened.response.release()
            self.pool.end(opened.upstream.name)
            self.observed(call, capture, pending)
            if answered is None:
                self.finish(record)

    def _tapped(self, call: Call, opened: Opened, capture: AnswerSink | None) -> bytes:
        """A whole answer accounted for: the bytes for the client."""
        record = call.record
        if call.path == "/embeddings":
            return tap_embeddings(record, opened.first, call.body.get("model") or call.model)
        if opened.native:
            return responses_tap.tap_whole(record, opened.first)
        return tap_body(
            record,
            opened.first,
            parsed=opened.parsed,
            **self._tapping(call, opened.upstream, capture),
        )


SEMANTICS_HEADER = "x-plumbline-semantics"
UNSENT_HEADER = "x-plumbline-unsent"
ACCEPTED_HEADER = "x-plumbline-accepted-unequal"


def answer_headers(record: Record, opened: Opened, client_id: str | None = None) -> dict[str, str]:
    """The gateway's headers on an answer: the request ids (`x-request-id`: the client's own,
    `client_id`, when it sent one, else the record's; gateway/edge/request_id.py), upstream,
    engine, provider, params hash, what a door dropped, what adapt clamped, what the upstream
    could not be told (and what of it the route accepts) and, off the production lane, the
    request's meaning."""
    headers = {
        "x-request-id": client_id or record.request_id,
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
        headers[DROPPED_HEADER] = record.dropped
    if record.clamped:
        headers["x-plumbline-clamped"] = record.clamped  # gateway/serving/adapt.py
    if record.lane != "client" and record.semantics:  # what an eval or shadow arm was asked
        headers[SEMANTICS_HEADER] = record.semantics
    if record.unsent:  # gateway/serving/dialect.py
        headers[UNSENT_HEADER] = record.unsent
    if record.accepted_unequal:
        headers[ACCEPTED_HEADER] = record.accepted_unequal
    return headers


@dataclass(slots=True)
class _Answer:
    """What watches and relays one call's answer, made once its request is written."""

    pending: Mirrored | None = None  # the shadow's mirror of it
    capture: AnswerSink | None = None  # its text sample
    relay: StreamRelay | None = None  # a stream's


class Answered(Response):
    """A whole answer whose record goes to the sinks (metrics, watchdog, store) before its
    body is sent, as a stream's does before its last event: the record queue journals it
    there (`gateway/ledger/journal.py`), so an answer a client has in full is never lost to a
    crash of the gateway. The sinks' cost is in `bench/ledger_journal.py`."""

    media_type = "application/json"

    def __init__(self, body: bytes, headers: dict[str, str], finish: Callable[[], None]):
        super().__init__(body, headers=headers)
        self.finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.finish()
        await super().__call__(scope, receive, send)
