"""Dispatch: attempts, retries and fallback — everything before the first byte reaches the client.

Retry is another attempt on the *same* upstream (one tenacity policy: connection errors, 429 and
5xx, honouring Retry-After — seconds or an HTTP date — up to `server.retry_after_max_s`, else
exponential backoff from `server.retry_backoff_s` with jitter). Fallback is moving to the *next*
candidate routing gave, at once (no wait: another upstream owes nothing to this one's
Retry-After). A first-byte timeout is not retried on the same upstream: it moves on at once.
The first byte is a stream's first data event (SSE comments before it, like OpenRouter's
`: OPENROUTER PROCESSING`, are not), a whole answer's response headers
(`server.first_byte_timeout_s`; its body then has `server.request_timeout_s` in all). Once
`open` returns, the caller owns the response; dispatch never switches upstream after that. A
stream whose call has a head (`Call.head`, the relay's, when the edge serves it) is the head's
sooner: its first event is checked in the callback that brings it and handed to the head there,
so the client has it without waiting for the dispatching task to wake (`FirstEvent`).

Which upstreams, in which order, is routing's (gateway/serving/routing.py `plan`); dispatch
executes the attempts. Waits go through `Dispatcher.sleep` (asyncio.sleep unless a test gives
another), time through its `Clock`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.config import Config, RouteConfig, Upstream
from gateway.errors import AttemptError, BadRequest, Unfit
from gateway.ledger.record import Attempt
from gateway.serving.adapt import Adapted, adapt_call, prompt_bounds
from gateway.serving.call import Call as Call
from gateway.serving.call import Translator as Translator
from gateway.serving.engine import Engines
from gateway.serving.first_event import Exchange, FirstEvent, first_block, validate
from gateway.serving.hooks import GateChoice
from gateway.serving.pool import Pool
from gateway.serving.prefix import PrefixIndex
from gateway.serving.redaction import Redactor
from gateway.serving.retry import retry_delay, with_retries
from gateway.serving.routing import Ask, Features, Tried, give_up, plan, shaped, wants_affinity
from gateway.serving.shape import classify
from gateway.serving.tokenizer import Counter, counted_by, prompt_count
from gateway.serving.upstream import THINKING_BUDGET, Opened, Targets, body_for, post
from gateway.serving.wire import Wire

log = logging.getLogger("plumbline")


@dataclass(frozen=True, slots=True)
class Clock:
    """The dispatcher's clocks: `now` is routing's (cool-downs, `Pool`'s), `timer` measures
    attempts and queueing (the record's `t0` is on it)."""

    now: Callable[[], float] = time.monotonic
    timer: Callable[[], float] = time.perf_counter


class Dispatcher:
    """Executes the attempts of one request on the upstreams routing plans (gateway/serving/
    routing.py). What it needs, and nothing of the app besides: the config, the pool (upstream
    state), the wire, what the engines said (windows, fingerprints), the prefix index, the gate's
    latest decision per (route, shape), a clock and a sleep."""

    def __init__(
        self,
        config: Config,
        pool: Pool,
        wire: Wire,
        engines: Engines,
        prefix: PrefixIndex,
        decision: Callable[[str, str | None], GateChoice | None] = lambda model, shape: None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Clock | None = None,
        rand: random.Random | None = None,
        counter: Counter | None = None,
    ):
        self.config = config
        self.upstreams = {u.name: u for u in config.upstreams}
        self.pool = pool
        self.wire = wire
        self.engines = engines
        self.prefix = prefix
        self.decision = decision
        self.sleep = sleep  # every wait between attempts
        self.clock = clock or Clock()
        self._rand = rand or random.Random()
        self.targets = Targets()
        # Tokenizers of the upstreams, for prompts near their window (gateway/serving/tokenizer.py).
        self.counter = counter or Counter()
        # What the upstreams say when they fail reaches clients, records and logs redacted.
        self.redactor = Redactor.of(config)
        self._shaped: dict[tuple[str, str], RouteConfig] = {}

    def _delay(self, error: BaseException | None, failed_attempts: int) -> float:
        return retry_delay(self.config.server, self._rand, error, failed_attempts)

    async def _with_retries(self, call: Call, upstream: Upstream) -> Opened:
        """Attempts on one upstream (gateway/serving/retry.py)."""
        return await with_retries(
            lambda: self._attempt(call, upstream),
            self.config.server.retries,
            self.sleep,
            self._delay,
        )

    def window(self, name: str) -> int | None:
        return self.config.upstream_window(self.upstreams[name], self.engines.windows.get(name))

    def route_for(self, model: str, shape: str) -> RouteConfig:
        key = (model, shape)
        route = self._shaped.get(key)
        if route is None:
            route = self._shaped[key] = shaped(self.config, model, shape)
        return route

    def _ask(self, call: Call) -> tuple[RouteConfig, Ask, list[bytes]]:
        """Classify the request, and gather what routing decides its candidates from."""
        base = self.config.models[call.model]
        embeddings = call.path == "/embeddings"
        estimate = (0, 0) if embeddings else prompt_bounds(call.body)
        call.bounds = estimate
        known = {n: self.window(n) for n in base.upstreams}
        shapes = base.shapes
        gated = base.policy == "cheapest_within_floor"

        def shape() -> None:
            own = [w for w in known.values() if w is not None]
            call.record.shape = classify(
                call.body,
                door=call.door,
                long_context_tokens=shapes.long_context_tokens if shapes else None,
                smallest_window=min(own) if own else None,
                estimate=estimate,
            )

        if shapes is None and not gated:
            # The shape routes nothing here (no rules, no gate): a label for the record, worked
            # out while the upstream reads the request.
            call.defer(shape)
            route = base
        else:
            shape()
            assert call.record.shape is not None
            route = self.route_for(call.model, call.record.shape)  # a shape keeps the policy
        keys = self.prefix.keys_for(call.body) if wants_affinity(route, call.record.lane) else []
        decision = self.decision(call.model, call.record.shape) if gated else None
        windows = {} if embeddings else {n: known.get(n) or self.window(n) for n in route.names}
        ask = Ask(
            features=Features(
                session=call.session,
                prefix_owner=self.prefix.owner(keys) if keys else None,
                rand=self._rand.random(),
            ),
            pin=call.pin,
            chosen=decision.chosen if decision is not None else None,
            prompt_low=estimate[0],
            windows=windows,
            counted=counted_by(
                self.counter, self.config, call, self.upstreams, windows, estimate[0]
            ),
            param="messages" if "messages" in call.body else "prompt",
            model=call.model,
        )
        return route, ask, keys

    async def open(self, call: Call) -> Opened:
        route, ask, keys = self._ask(call)
        names = plan(
            route,
            self.pool.views(route.names) if len(route.names) > 1 else {},
            ask,
            self.clock.now(),
            self.config.server.overload_margin,
        )
        call.record.queue_s = self.clock.timer() - call.record.t0
        tried = Tried()
        for name in names:
            opened = await self._try(call, name, tried)
            if opened is not None:
                if keys:
                    self.prefix.remember(keys, name)
                return opened
        raise give_up(call.model, tried)

    async def _try(self, call: Call, name: str, tried: Tried) -> Opened | None:
        """One candidate's attempts; None when the next candidate is to be tried."""
        try:
            return await self._with_retries(call, self.upstreams[name])
        except Unfit as e:  # the next candidate may take what this one cannot
            tried.refused(e)
        except AttemptError as e:
            if e.client_error:  # the upstream answered: its refusal is the client's
                self._served_by(call, name)
                raise BadRequest(e.message, param=e.param, code=f"upstream_{e.status}") from None
            tried.failed(e.message, e.outcome)
        return None

    def _served_by(self, call: Call, name: str) -> None:
        call.record.upstream = name
        call.record.engine = self.engines.known.get(name)

    def _request(
        self, call: Call, upstream: Upstream, counted: int | None = None
    ) -> tuple[str, bytes, bool, Adapted | None]:
        """(path, body, native, what adapt did) of one attempt. Raises Unfit before anything is
        sent; the window the server said it serves, if any, is adapt's too, and so is the
        prompt's tokenizer count (`counted`)."""
        learned = self.engines.windows.get(upstream.name)
        adapted = adapt_call(self.config, call, upstream, learned, counted)
        native = call.native is not None and upstream.responses_api
        body = call.native if native and call.native else adapted.body if adapted else call.body
        cap = self.config.thinking_cap(upstream) if THINKING_BUDGET in body else None
        require = adapted is not None and adapted.require
        data = body_for(upstream, body, call.stream, native, cap, require)
        return ("/responses" if native else call.path), data, native, adapted

    def _budget(self, call: Call) -> float:
        server = self.config.server
        if call.stream:
            return server.ttft_timeout_s
        return min(server.first_byte_timeout_s, server.request_timeout_s)

    async def _attempt(self, call: Call, upstream: Upstream) -> Opened:
        window = self.window(upstream.name)  # the prompt's count near it, if any:
        counted = await prompt_count(self.counter, self.config, call, upstream, window)
        started = self.clock.timer()
        path, data, native, adapted = self._request(call, upstream, counted)
        if call.record.trace is not None:  # [telemetry]: this attempt's span
            call.record.trace.attempt(upstream.name, upstream.kind, upstream.model)
        self.pool.begin(upstream.name)
        exchange = Exchange()
        headed = call.stream and not self._at_once(call)  # a head, if the call has one, begins

        def sent() -> None:
            self._sent(call, upstream, adapted, native, headed)

        def accepted(first: bytes, parsed: Any) -> Opened:
            return self._accepted(call, upstream, exchange, adapted, native, started, first, parsed)

        try:
            first, parsed = await self._exchange(
                call, upstream, path, data, native, exchange, sent, accepted if headed else None
            )
        except TimeoutError:
            if exchange.opened is not None:  # begun just before the bound: the stream stands
                return exchange.opened
            raise self._timed_out(call, upstream, exchange, started) from None
        except AttemptError as e:
            # A 4xx that is the request's fault is the upstream answering, not failing: counted
            # as a failure, one client's bad requests would cool it down for everyone.
            self._failed(call, upstream.name, e.outcome, e.status, started, not e.client_error)
            if exchange.resp is not None:
                exchange.resp.release()
            raise
        except asyncio.CancelledError:
            self._cancelled(call, upstream, exchange, started)
            raise
        except OSError as e:  # the answer began, then the connection failed while it was read
            self._failed(call, upstream.name, "stream_error", None, started)
            said = self.redactor.text(str(e))
            raise AttemptError("stream_error", f"{upstream.name}: {said}") from None
        return exchange.opened or accepted(first, parsed)

    @staticmethod
    def _sent(
        call: Call, upstream: Upstream, adapted: Adapted | None, native: bool, headed: bool
    ) -> None:
        """The request is written: what it did not wait for, done now (the upstream prefills).
        The attempt's params hash (kept for `mark`), and the client's from the same meaning."""
        if adapted is not None:
            adapted.params_hash  # noqa: B018 - worked out and kept for `mark`
            if call.record.params_hash is None:  # not read from the body again (`call_of`)
                call.record.params_hash = adapted.asked_hash(call.body)
        call.flush()
        if headed and call.head is not None:
            call.head.prepare(upstream, native)

    def _accepted(
        self,
        call: Call,
        upstream: Upstream,
        exchange: Exchange,
        adapted: Adapted | None,
        native: bool,
        started: float,
        first: bytes,
        parsed: Any,
    ) -> Opened:
        """The attempt succeeded: its bookkeeping, then the answer is the caller's."""
        assert exchange.resp is not None
        self._note(call, upstream.name, "ok", exchange.resp.status, started)
        self.pool.succeeded(upstream.name)
        if adapted is not None:
            adapted.mark(call.record)
        self._served_by(call, upstream.name)
        opened = exchange.opened = Opened(upstream, exchange.resp, first, native, parsed)
        return opened

    def _cancelled(
        self, call: Call, upstream: Upstream, exchange: Exchange, started: float
    ) -> None:
        """The client went away (or the server is stopping) during an attempt."""
        if exchange.opened is not None and call.head is not None:
            call.head.abandon()  # the stream had begun: it ends as a client gone
            return
        # Close the upstream request so the engine stops generating, and keep the in-flight
        # count right.
        self.pool.end(upstream.name)
        self._note(call, upstream.name, "cancelled", None, started)
        if exchange.resp is not None:
            exchange.resp.close()

    def _at_once(self, call: Call) -> bool:
        return self.config.models[call.model].stream_head == "at_once"

    async def _exchange(
        self,
        call: Call,
        upstream: Upstream,
        path: str,
        data: bytes,
        native: bool,
        exchange: Exchange,
        sent: Callable[[], None] | None = None,
        accepted: Callable[[bytes, Any], Opened] | None = None,
    ) -> tuple[bytes, Any]:
        """A stream's first data event, or a whole answer's headers, within the first-byte
        budget; then a whole answer's body within what is left of `request_timeout_s` (a
        stream's silences are bounded by `Silence` once it is relayed). With `accepted` (a
        stream with a head), the first event is checked in the callback that brings it, and
        accepted there and handed to the head (`FirstEvent`)."""
        started = self.clock.timer()
        async with asyncio.timeout(self._budget(call)) as bound:
            target = self.targets(upstream)
            if call.record.trace is not None:  # the upstream continues the client's trace
                target = replace(target, head=target.head + call.record.trace.header())
            resp = exchange.resp = await post(
                self.wire, upstream, path, data, target, sent, self.redactor
            )
            if call.stream:
                if self._at_once(call):
                    return b"", None  # the relay takes the first event as any other
                head = call.head  # made as the request was written (`Call.flush`)
                if accepted is not None and head is not None:
                    checked = FirstEvent(
                        resp,
                        lambda first: validate(call, first, native),
                        lambda first, parsed: head.begin(accepted(first, parsed)),
                    )
                    return await checked.done
                first = await first_block(resp)
            else:
                exchange.answered = True
                left = self.config.server.request_timeout_s - (self.clock.timer() - started)
                bound.reschedule(asyncio.get_running_loop().time() + left)
                first = await resp.read()
            return first, validate(call, first, native)

    def _timed_out(
        self, call: Call, upstream: Upstream, exchange: Exchange, started: float
    ) -> AttemptError:
        outcome = "timeout" if exchange.answered else "ttft_timeout"
        self._failed(call, upstream.name, outcome, None, started)
        if exchange.resp is not None:
            exchange.resp.close()
        said = (
            f"did not finish its answer within {self.config.server.request_timeout_s:g}s"
            if exchange.answered
            else f"sent no first byte within {self._budget(call):g}s"
        )
        return AttemptError(outcome, f"{upstream.name} {said}", retryable=False)

    def _note(
        self, call: Call, name: str, outcome: str, status: int | None, started: float
    ) -> None:
        call.record.attempts.append(Attempt(name, outcome, status, self.clock.timer() - started))
        if call.record.trace is not None:
            call.record.trace.attempt_end(outcome, status)

    def _failed(
        self,
        call: Call,
        name: str,
        outcome: str,
        status: int | None,
        started: float,
        upstream_fault: bool = True,
    ) -> None:
        self.pool.end(name)
        if upstream_fault:
            self.pool.failed(name)
        self._note(call, name, outcome, status, started)
