"""Dispatch: attempts, retries and fallback — everything before the first byte reaches the client.

Retry is another attempt on the *same* upstream (one tenacity policy: connection errors, 429 and
5xx, honouring Retry-After — seconds or an HTTP date — up to `server.retry_after_max_s`, else
exponential backoff from `server.retry_backoff_s` with jitter). Fallback is moving to the *next*
candidate routing gave, at once (no wait: another upstream owes nothing to this one's
Retry-After). A first-byte timeout is not retried on the same upstream: it moves on at once.
The first byte is a stream's first data event (SSE comments before it, like OpenRouter's
`: OPENROUTER PROCESSING`, are not), a whole answer's response headers
(`server.first_byte_timeout_s`; its body then has `server.request_timeout_s` in all). Once
`open` returns, the caller owns the response; dispatch never switches upstream after that.

Waits go through `Dispatcher.sleep` (asyncio.sleep unless a test gives another).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
)

from gateway.config import Upstream
from gateway.errors import (
    AllUpstreamsFailed,
    BadRequest,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.ledger.record import Attempt, Record
from gateway.serving.adapt import Unfit, adapt_call
from gateway.serving.routing import Features, candidates
from gateway.serving.upstream import THINKING_BUDGET, AttemptError, Opened, Targets, body_for, post
from gateway.serving.wire import Reply
from gateway.trust.gate import gated_order

if TYPE_CHECKING:
    from gateway.edge.app import Gateway


class Translator(Protocol):
    """A front door that speaks another API renders the chat-completions answer in its own.

    `whole` gets the (tapped) chat.completion object and returns the door's body; `feed` gets
    tapped chat SSE bytes (whole events, ending with `data: [DONE]`, or an OpenAI error event
    `data: {"error": …}` when the upstream broke mid-stream) and returns the door's SSE bytes.
    """

    def whole(self, chat: dict[str, Any]) -> bytes: ...

    def feed(self, sse: bytes) -> bytes: ...


@dataclass(slots=True)
class Call:
    """One client request after its front door: door-agnostic from here on."""

    door: str
    path: str  # upstream path: /chat/completions, /completions, /embeddings
    model: str
    body: dict[str, Any]
    stream: bool
    record: Record
    client_wants_usage: bool = False
    session: str | None = None
    translator: Translator | None = None
    # The door's own request, relayed as is to upstreams that implement that API natively
    # (`Upstream.responses_api`); `body` (the chat translation) goes to the others.
    native: dict[str, Any] | None = None
    # Eval lane only: the upstream named by `x-plumbline-upstream` (gateway/trust/gate.py).
    pin: str | None = None

    @property
    def chat(self) -> bool:
        return self.path == "/chat/completions"


def _retryable(error: BaseException) -> bool:
    return isinstance(error, AttemptError) and error.retryable and error.outcome != "ttft_timeout"


class Dispatcher:
    def __init__(
        self,
        gw: Gateway,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: random.Random | None = None,
    ):
        self.gw = gw
        self.sleep = sleep  # every wait between attempts
        self._rand = rand or random.Random()
        self.targets = Targets()

    def _delay(self, error: BaseException | None, failed_attempts: int) -> float:
        """Seconds before the next attempt: Retry-After when the upstream said so (capped),
        else exponential backoff with jitter."""
        if isinstance(error, AttemptError) and error.retry_after is not None:
            return min(error.retry_after, self.gw.config.server.retry_after_max_s)
        base = self.gw.config.server.retry_backoff_s
        return min(base * 2 ** (failed_attempts - 1), base * 16) + self._rand.uniform(0, base)

    async def _with_retries(self, call: Call, upstream: Upstream) -> Opened:
        """Attempts on one upstream. The first runs bare (most succeed, and tenacity's machinery
        measured a tenth of the per-request CPU); the retries run under one tenacity policy."""
        try:
            return await self._attempt(call, upstream)
        except AttemptError as e:
            retries = self.gw.config.server.retries
            if not retries or not _retryable(e):
                raise
            await self.sleep(self._delay(e, 1))
        retrying = AsyncRetrying(
            sleep=self.sleep,
            stop=stop_after_attempt(retries),
            wait=lambda state: self._delay(
                state.outcome.exception() if state.outcome else None, state.attempt_number + 1
            ),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._attempt(call, upstream)
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def open(self, call: Call) -> Opened:
        gw = self.gw
        route = gw.config.models[call.model]
        everyone = route.names
        keys: list[bytes] = []
        if len(everyone) == 1:
            names = list(everyone)  # what `candidates` returns for one upstream, in any state
        else:
            # Eval traffic neither follows nor plants prefixes: it must not evict production's.
            affinity = route.policy == "prefix_affinity" and call.record.lane == "prod"
            keys = gw.prefix.keys_for(call.body) if affinity else []
            features = Features(
                session=call.session,
                prefix_owner=gw.prefix.owner(keys) if keys else None,
                rand=self._rand.random(),
            )
            names = candidates(
                route,
                gw.pool.views(everyone),
                features,
                time.monotonic(),
                gw.config.server.overload_margin,
            )
        if call.pin is not None:
            names = [call.pin]  # an eval of one upstream must measure that upstream
        elif route.policy == "cheapest_within_floor":
            names = gated_order(names, gw.gate_book.latest(call.model))
        if not names:
            raise UpstreamUnavailable(f"no upstream is configured for model {call.model!r}")
        call.record.queue_s = time.perf_counter() - call.record.t0
        causes: list[str] = []
        unfit: list[Unfit] = []  # upstreams that cannot serve the request as asked (adapt.py)
        timed_out = False
        for name in names:
            upstream = gw.upstreams[name]
            try:
                opened = await self._with_retries(call, upstream)
            except Unfit as e:  # the next candidate may take what this one cannot
                unfit.append(e)
                causes.append(e.message)
                continue
            except AttemptError as e:
                if e.client_error:  # the upstream answered: its refusal is the client's
                    call.record.upstream = name
                    call.record.engine = gw.engines.known.get(name)
                    raise BadRequest(e.message, code=f"upstream_{e.status}") from None
                causes.append(e.message)
                timed_out = timed_out or e.outcome in ("ttft_timeout", "timeout")
                continue
            if keys:
                gw.prefix.remember(keys, name)
            call.record.upstream = name
            call.record.engine = gw.engines.known.get(name)
            return opened
        if unfit and len(unfit) == len(causes):
            raise unfit[0]  # no candidate failed: none could serve it, the client's 400
        message = f"every upstream for {call.model!r} failed: " + " | ".join(causes)
        raise (UpstreamTimeout if timed_out else AllUpstreamsFailed)(message, causes)

    async def _attempt(self, call: Call, upstream: Upstream) -> Opened:
        gw = self.gw
        server = gw.config.server
        started = time.perf_counter()
        # Raises Unfit before anything is sent; the window the server said it serves, if any.
        adapted = adapt_call(gw.config, call, upstream, gw.engines.windows.get(upstream.name))
        gw.pool.begin(upstream.name)
        native = call.native is not None and upstream.responses_api
        path = "/responses" if native else call.path
        data = body_for(
            upstream,
            call.native if native and call.native else adapted.body if adapted else call.body,
            call.stream,
            native=native,
            thinking_cap=gw.config.thinking_cap(upstream) if THINKING_BUDGET in call.body else None,
        )
        first_byte_budget = (
            server.ttft_timeout_s
            if call.stream
            else min(server.first_byte_timeout_s, server.request_timeout_s)
        )
        # A stream's first data event, or a whole answer's headers, within `first_byte_budget`;
        # then a whole answer's body within what is left of `request_timeout_s`, a stream's
        # silences bounded by `gw.silence` once it is relayed.
        resp: Reply | None = None
        answered = False
        try:
            async with asyncio.timeout(first_byte_budget) as bound:
                resp = await post(gw.wire, upstream, path, data, self.targets(upstream))
                first = b""
                if call.stream:
                    first = await _first_block(resp)
                else:
                    answered = True
                    loop = asyncio.get_running_loop()
                    bound.reschedule(loop.time() + server.request_timeout_s - _since(started))
                    first = await resp.read()
                parsed = _validate(call, first, native)
        except TimeoutError:
            outcome = "timeout" if answered else "ttft_timeout"
            self._failed(call, upstream.name, outcome, None, started)
            if resp is not None:
                resp.close()
            said = (
                f"did not finish its answer within {server.request_timeout_s:g}s"
                if answered
                else f"sent no first byte within {first_byte_budget:g}s"
            )
            raise AttemptError(outcome, f"{upstream.name} {said}", retryable=False) from None
        except AttemptError as e:
            # A 4xx that is the request's fault is the upstream answering, not failing: counted
            # as a failure, one client's bad requests would cool it down for everyone.
            self._failed(call, upstream.name, e.outcome, e.status, started, not e.client_error)
            if resp is not None:
                resp.release()
            raise
        except asyncio.CancelledError:
            # The client went away (or the server is stopping): close the upstream request so
            # the engine stops generating, and keep the in-flight count right.
            gw.pool.end(upstream.name)
            call.record.attempts.append(
                Attempt(upstream.name, "cancelled", None, time.perf_counter() - started)
            )
            if resp is not None:
                resp.close()
            raise
        except OSError as e:  # the answer began, then the connection failed while it was read
            self._failed(call, upstream.name, "stream_error", None, started)
            raise AttemptError("stream_error", f"{upstream.name}: {e}") from None
        call.record.attempts.append(
            Attempt(upstream.name, "ok", resp.status, time.perf_counter() - started)
        )
        gw.pool.succeeded(upstream.name)
        if adapted is not None:
            adapted.mark(call.record)
        return Opened(upstream, resp, first, native, parsed)

    def _failed(
        self,
        call: Call,
        name: str,
        outcome: str,
        status: int | None,
        started: float,
        upstream_fault: bool = True,
    ) -> None:
        gw = self.gw
        gw.pool.end(name)
        if upstream_fault:
            gw.pool.failed(name)
        call.record.attempts.append(Attempt(name, outcome, status, time.perf_counter() - started))


def _since(started: float) -> float:
    return time.perf_counter() - started


def _first_data(block: bytes) -> int:
    """Where the first data line of `block` starts (SSE: a line that begins with `data:`), -1
    if none does; comments and other fields before it are skipped."""
    at = 0 if block.startswith(b"data:") else block.find(b"\ndata:") + 1
    return at if at > 0 or block.startswith(b"data:") else -1


def _validate(call: Call, first: bytes, native: bool = False) -> Any:
    """A 200 that is not what was asked for fails the attempt while fallback is still possible.
    Returns the JSON read (a whole answer's, a stream's first event)."""
    if call.stream:
        start = _first_data(first)
        end = first.find(b"\n", start) if start >= 0 else -1
        payload = first[start + 5 : end if end >= 0 else None].strip() if start >= 0 else b""
        if payload == b"[DONE]":
            return None
    else:
        payload = first
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise AttemptError("malformed", "upstream sent a response that is not valid JSON") from None
    if not isinstance(obj, dict):
        raise AttemptError("malformed", "upstream sent JSON that is not an object")
    if isinstance(obj.get("error"), dict | str):  # a 200 that is an error (OpenRouter does this)
        raise AttemptError("upstream_error", "upstream answered 200 with an error")
    if native:
        if "type" not in obj and obj.get("object") != "response":
            raise AttemptError("malformed", "upstream sent no Responses API event")
    elif "choices" not in obj and "data" not in obj:
        raise AttemptError("malformed", "upstream sent JSON without choices")
    elif not call.stream and any(
        isinstance(c, dict) and c.get("finish_reason") == "error" for c in obj.get("choices") or ()
    ):
        raise AttemptError("upstream_error", "upstream answered 200 with a choice that failed")
    return obj


async def _first_block(resp: Reply) -> bytes:
    """Read until the first whole data event is in hand (or the stream ends): comments and
    keep-alives before it (OpenRouter's `: OPENROUTER PROCESSING`) are not a first byte."""
    chunks: list[bytes] = []
    held = b""
    while block := await resp.read_some():
        chunks.append(block)
        held += block
        if b"\r" in held:
            held = held.replace(b"\r\n", b"\n")
        start = _first_data(held)
        if start >= 0 and b"\n\n" in held[start:]:
            break
        if start < 0:  # nothing of a data event yet: keep only a partial line
            held = held[held.rfind(b"\n") + 1 :]
    else:
        if not chunks:
            resp.release()
            raise AttemptError("stream_error", "upstream closed the stream before any event")
    return b"".join(chunks)
