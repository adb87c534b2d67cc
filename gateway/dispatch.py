"""Dispatch: attempts, retries and fallback — everything before the first byte reaches the client.

Retry is another attempt on the *same* upstream (one tenacity policy: connection errors, 429 and
5xx, honouring Retry-After up to a cap). Fallback is moving to the *next* candidate routing gave.
A first-byte timeout is not retried on the same upstream: it moves on at once. Once `open`
returns, the caller owns the response; dispatch never switches upstream after that.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
)

from gateway.adapt import Unfit, adapt_call
from gateway.config import Upstream
from gateway.errors import (
    AllUpstreamsFailed,
    BadRequest,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.gate import gated_order
from gateway.record import Attempt, Record
from gateway.routing import Features, candidates
from gateway.upstream import THINKING_BUDGET, AttemptError, Opened, Targets, body_for, post
from gateway.wire import Reply

if TYPE_CHECKING:
    from gateway.app import Gateway

MAX_RETRY_AFTER_S = 10.0


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
    # Eval lane only: the upstream named by `x-plumbline-upstream` (gateway/gate.py).
    pin: str | None = None

    @property
    def chat(self) -> bool:
        return self.path == "/chat/completions"


def _retryable(error: BaseException) -> bool:
    return isinstance(error, AttemptError) and error.retryable and error.outcome != "ttft_timeout"


class Dispatcher:
    def __init__(self, gw: Gateway):
        self.gw = gw
        self._rand = random.Random()
        self.targets = Targets()

    def _delay(self, error: BaseException | None, failed_attempts: int) -> float:
        """Seconds before the next attempt: Retry-After when the upstream said so (capped),
        else exponential backoff with jitter."""
        if isinstance(error, AttemptError) and error.retry_after is not None:
            return min(error.retry_after, MAX_RETRY_AFTER_S)
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
            await asyncio.sleep(self._delay(e, 1))
        retrying = AsyncRetrying(
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
        adapted = adapt_call(gw.config, call, upstream)  # raises Unfit before anything is sent
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
        first_byte_budget = server.ttft_timeout_s if call.stream else server.request_timeout_s
        # A non-streamed answer is bounded by `first_byte_budget` (the whole request timeout)
        # below, a stream's silences by `gw.silence` once it is relayed.
        resp: Reply | None = None
        try:
            async with asyncio.timeout(first_byte_budget):
                resp = await post(gw.wire, upstream, path, data, self.targets(upstream))
                first = b""
                if call.stream:
                    first = await _first_block(resp)
                else:
                    first = await resp.read()
                parsed = _validate(call, first, native)
        except TimeoutError:
            self._failed(call, upstream.name, "ttft_timeout", None, started)
            raise AttemptError(
                "ttft_timeout",
                f"{upstream.name} sent no first byte within {first_byte_budget:g}s",
                retryable=False,
            ) from None
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
        except OSError as e:
            self._failed(call, upstream.name, "connect_error", None, started)
            raise AttemptError("stream_error", f"{upstream.name}: {e}") from None
        call.record.attempts.append(
            Attempt(upstream.name, "ok", resp.status, time.perf_counter() - started)
        )
        gw.pool.succeeded(upstream.name)
        if adapted is not None:
            adapted.mark(call.record)
        return Opened(upstream, resp, first, native, None if call.stream else parsed)

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


def _validate(call: Call, first: bytes, native: bool = False) -> Any:
    """A 200 that is not what was asked for fails the attempt while fallback is still possible.
    Returns the JSON read (a whole answer's, a stream's first event)."""
    if call.stream:
        start = first.find(b"data:")
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
    if native:
        if "type" not in obj and obj.get("object") != "response":
            raise AttemptError("malformed", "upstream sent no Responses API event")
    elif "choices" not in obj and "data" not in obj:
        raise AttemptError("malformed", "upstream sent JSON without choices")
    return obj


async def _first_block(resp: Reply) -> bytes:
    """Read until at least one whole SSE event is in hand (or the stream ends)."""
    chunks: list[bytes] = []
    while block := await resp.read_some():
        chunks.append(block)
        if b"\n\n" in block or b"\r\n\r\n" in block:
            break
    else:
        if not chunks:
            resp.release()
            raise AttemptError("stream_error", "upstream closed the stream before any event")
    return b"".join(chunks)
