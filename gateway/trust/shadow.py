"""Shadow evaluation: mirror a sampled share of a route's live traffic to another upstream.

The client only ever sees the primary's answer. For a sampled request `ShadowMirror.consider`
starts a fire-and-forget task that sends the same effective body (same sampling parameters, so
the same params hash; never streamed) to the route's shadow upstream, under the shadow's own
concurrency cap and daily budget (USD or requests, per UTC day). It never waits: a request that
finds the cap full or the budget spent is simply not mirrored, and counted. A mirrored request
holds the most it can cost (`most_it_can_cost`) against the USD budget until its own cost is
known, so shadows in flight cannot pass the limit.

The shadow's answer gets its own `Record` (lane "shadow", `shadow_of` = the primary's request id,
the primary's accept time, so the pair joins on the primary key). When both sides have finished
the agreement (`gateway/trust/agreement.py`) is set on the shadow record and it goes to the sinks
like any other record. `gateway/reports/shadow.py` reads the pairs back from the store
(`plumbline report shadow`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from gateway.config import Config, Price, Upstream
from gateway.config.trust import ShadowConfig
from gateway.errors import AttemptError, MalformedStream, Unfit
from gateway.ledger.cost import request_cost
from gateway.ledger.record import Attempt, Record
from gateway.serving.replay import Wire, replay
from gateway.trust.agreement import Answer, agreement
from gateway.trust.capture import Capture

if TYPE_CHECKING:
    from gateway.ledger.store import Store

log = logging.getLogger("plumbline.shadow")
CAPTURE_CHARS = 65_536  # of a shadow's answer kept for the agreement


# ---- budget ----------------------------------------------------------------------------------


@dataclass(slots=True)
class DailyBudget:
    """Requests and USD spent in the current UTC day against the shadow's limits."""

    usd: float | None
    requests: int | None
    day: int = -1
    spent_usd: float = 0.0
    sent: int = 0

    def allows(self, now: float, hold_usd: float = 0.0) -> bool:
        """Room for one more request that may cost `hold_usd` (`Store.shadow_reserve`)."""
        day = int(now // 86_400)
        if day != self.day:
            self.day, self.spent_usd, self.sent = day, 0.0, 0
        if self.requests is not None and self.sent >= self.requests:
            return False
        if self.usd is None:
            return True
        return self.spent_usd + hold_usd <= self.usd if hold_usd > 0 else self.spent_usd < self.usd


def most_it_can_cost(body: dict[str, Any], max_tokens: int | None, price: Price | None) -> float:
    """The most a shadow request can cost, held against the USD budget while it runs: every
    byte of its body a prompt token (a token is at least one byte of text; images excepted) and
    `max_tokens` of output for each of its `n` choices. 0 when it has no price, or no
    `max_tokens` to bound it: then only finished requests' costs are counted."""
    if price is None or max_tokens is None:
        return 0.0
    n = body.get("n")
    output = max_tokens * (n if isinstance(n, int) and n > 1 else 1)
    prompt = len(orjson.dumps(body))
    return (prompt * max(price.input, price.cached_input or 0.0) + output * price.output) / 1e6


# ---- the mirror ------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Pending:
    """One mirrored request: both sides, and the record that goes out once both are in."""

    model: str
    shadow_record: Record
    item_id: str | None = None
    primary: Answer | None = None
    shadow: Answer | None = None
    done: bool = False
    tools: list[dict[str, Any]] | None = field(default=None)
    # USD held against the daily budget until the shadow's own cost is known.
    hold_usd: float = 0.0
    # Set when the primary ends, with the upstream that answered it: the shadow waits for it,
    # and is not sent where that upstream is the shadow's own (after a fallback).
    primary_in: asyncio.Event = field(default_factory=asyncio.Event)
    primary_upstream: str | None = None


Scorer = Callable[[str, Answer], str | None]


class ShadowMirror:
    """Decides, launches and pairs shadow requests for every route that has a shadow."""

    def __init__(
        self,
        config: Config,
        shadows: Mapping[str, ShadowConfig],
        wire: Wire,
        finish: Callable[[Record], None],
        *,
        registry: CollectorRegistry | None = None,
        scorer: Scorer | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
        store: Store | None = None,
    ):
        self.config = config
        # With a store, the daily budgets are counted in it (`Store.shadow_reserve`), across
        # every gateway on it and across restarts; the counts in memory are this process's.
        self._store = store
        self.shadows = dict(shadows)
        self._wire = wire
        self._finish = finish
        self.scorer = scorer
        self._rand = rand
        self._clock = clock
        self.inflight = {m: 0 for m in self.shadows}
        self.budgets = {
            m: DailyBudget(s.budget_usd_per_day, s.budget_requests_per_day)
            for m, s in self.shadows.items()
        }
        self.tasks: set[asyncio.Task[None]] = set()
        self.waiting: set[Pending] = set()  # shadows waiting for their primary to end
        r = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "gateway_shadow_requests",
            "Shadow mirroring decisions and outcomes: mirrored, failed, skipped_cap, "
            "skipped_budget, skipped_same_upstream (the shadow's upstream answered the primary).",
            ["model", "upstream", "outcome"],
            registry=r,
        )
        self.agreements = Counter(
            "gateway_shadow_agreement",
            "Shadow answers by agreement with the primary.",
            ["model", "upstream", "agreement"],
            registry=r,
        )

    @classmethod
    def from_config(
        cls,
        config: Config,
        wire: Wire,
        finish: Callable[[Record], None],
        **kw: Any,
    ) -> ShadowMirror:
        shadows = {
            m: s for m, r in config.models.items() if (s := getattr(r, "shadow", None)) is not None
        }
        return cls(config, shadows, wire, finish, **kw)

    def consider(
        self,
        model: str,
        path: str,
        body: dict[str, Any],
        record: Record,
        item_id: str | None = None,
    ) -> Pending | None:
        """Mirror this request? Synchronous and cheap; the shadow runs as its own task."""
        cfg = self.shadows.get(model)
        if cfg is None or record.lane != "client" or path != "/chat/completions":
            return None
        if self._rand() >= cfg.fraction:
            return None
        if self.inflight[model] >= cfg.max_concurrency:
            self.requests.labels(model, cfg.upstream, "skipped_cap").inc()
            return None
        budget = self.budgets[model]
        hold = 0.0
        if cfg.budget_usd_per_day is not None:
            hold = most_it_can_cost(body, record.max_tokens, self.config.prices.get(cfg.upstream))
        if not budget.allows(self._clock(), hold):
            self.requests.labels(model, cfg.upstream, "skipped_budget").inc()
            return None
        budget.sent += 1
        budget.spent_usd += hold
        self.inflight[model] += 1
        if self._store is None:
            self.requests.labels(model, cfg.upstream, "mirrored").inc()
        shadow_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        shadow_body["stream"] = False
        shadow = Record(
            request_id=record.request_id + "-shadow",
            door=record.door,
            model=model,
            stream=False,
            time=record.time,
            key_id=record.key_id,
            lane="shadow",
            upstream=cfg.upstream,
            max_tokens=record.max_tokens,
            params_hash=record.params_hash,
            shadow_of=record.request_id,
        )
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        pending = Pending(model, shadow, item_id, tools=tools, hold_usd=hold)
        self.waiting.add(pending)
        task = asyncio.get_running_loop().create_task(self._run(pending, cfg, path, shadow_body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return pending

    def primary_done(self, pending: Pending, record: Record, capture: Capture | None) -> None:
        """The primary has finished (call after its capture's finish())."""
        ok = record.status == 200 and record.error_class is None and capture is not None
        answer = Answer(
            ok, capture.answer if capture else "", tuple(capture.tool_calls()) if capture else ()
        )
        pending.primary = self._scored(pending, answer)
        pending.primary_upstream = record.upstream
        pending.primary_in.set()
        self._maybe_resolve(pending)

    async def _run(
        self, pending: Pending, cfg: ShadowConfig, path: str, body: dict[str, Any]
    ) -> None:
        record = pending.shadow_record
        day = self.budgets[pending.model].day
        if await self._same_upstream(pending, cfg):
            return
        if self._store is not None and not await self._reserve(pending, cfg, day):
            return
        upstream = self.config.upstream(cfg.upstream)
        capture = Capture(record, pending.tools, keep_text=True, max_chars=CAPTURE_CHARS)
        started = time.perf_counter()
        try:
            outcome = await self._ask(pending.model, upstream, cfg, path, body, capture)
        finally:
            self.inflight[pending.model] -= 1
        elapsed = time.perf_counter() - started
        record.attempts.append(Attempt(upstream.name, outcome, record.status or None, elapsed))
        record.e2e_s = elapsed
        record.cost_usd = request_cost(record, self.config.prices.get(upstream.name))
        await self._settle(pending, record, day)
        if outcome != "ok":
            self.requests.labels(pending.model, cfg.upstream, "failed").inc()
        answer = Answer(outcome == "ok", capture.answer, tuple(capture.tool_calls()))
        pending.shadow = self._scored(pending, answer)
        self._maybe_resolve(pending)

    async def _ask(
        self,
        model: str,
        upstream: Upstream,
        cfg: ShadowConfig,
        path: str,
        body: dict[str, Any],
        capture: Capture,
    ) -> str:
        """Send the shadow request and capture its answer; the attempt's outcome, with the
        record's status and error class set. Never raises: a shadow takes nothing down."""
        record = capture.record
        try:
            # Said as the shadow upstream can serve it, marked on its record.
            async with asyncio.timeout(cfg.timeout_s):
                out = await replay(self.config, self._wire, model, upstream, path, body, record)
            for i, choice in enumerate(orjson.loads(out).get("choices") or ()):
                capture.message(choice.get("index", i), choice.get("message") or {})
            record.status = 200
            capture.finish()
            return "ok"
        except Unfit as e:  # it cannot serve this request as asked: nothing is sent
            outcome, record.status, record.error_class = "refused", e.status, type(e).__name__
        except AttemptError as e:
            outcome, record.status, record.error_class = e.outcome, e.status or 502, "AttemptError"
        except TimeoutError:
            outcome, record.status, record.error_class = "timeout", 504, "ShadowTimeout"
        except (OSError, MalformedStream) as e:
            outcome, record.status, record.error_class = "error", 502, type(e).__name__
        except Exception:  # a shadow must never take anything else down
            log.exception("shadow request failed")
            outcome, record.status, record.error_class = "error", 500, "ShadowError"
        return outcome

    async def _settle(self, pending: Pending, record: Record, day: int) -> None:
        """Give the hold back and count the shadow's own cost against its daily budget (in
        the store too, when there is one)."""
        spent = record.charged_cost_usd if record.charged_cost_usd is not None else record.cost_usd
        settle = (spent or 0.0) - pending.hold_usd
        self.budgets[pending.model].spent_usd += settle
        if self._store is not None and settle:
            try:
                await asyncio.to_thread(self._store.shadow_spent, pending.model, day, settle)
            except Exception:
                log.exception("shadow: could not count $%.6f against %s", settle, pending.model)

    async def _reserve(self, pending: Pending, cfg: ShadowConfig, day: int) -> bool:
        """Take one request of the shadow's daily budget in the store. Refused, or the store
        unreachable (a shadow costs money: no budget, no shadow): nothing is sent and no shadow
        record is written."""
        try:
            allowed = await asyncio.to_thread(
                self._store.shadow_reserve,  # type: ignore[union-attr]
                pending.model,
                day,
                cfg.budget_requests_per_day,
                cfg.budget_usd_per_day,
                pending.hold_usd,
            )
        except Exception:
            log.exception("shadow: the budget could not be read from the store")
            allowed = False
        outcome = "mirrored" if allowed else "skipped_budget"
        self.requests.labels(pending.model, cfg.upstream, outcome).inc()
        if not allowed:
            self.inflight[pending.model] -= 1
            budget = self.budgets[pending.model]  # nothing was sent: this process's count too
            budget.sent -= 1
            budget.spent_usd -= pending.hold_usd
            pending.done = True  # the primary's end resolves nothing
        return allowed

    async def _same_upstream(self, pending: Pending, cfg: ShadowConfig) -> bool:
        """Wait for the primary (at most the shadow's timeout); True, with nothing sent and the
        skip counted (`skipped_same_upstream`), where the shadow's upstream answered it: a
        pair of one upstream with itself compares nothing."""
        try:
            async with asyncio.timeout(cfg.timeout_s):
                await pending.primary_in.wait()
        except TimeoutError:
            return False
        finally:
            self.waiting.discard(pending)
        if pending.primary_upstream != cfg.upstream:
            return False
        self.requests.labels(pending.model, cfg.upstream, "skipped_same_upstream").inc()
        self.inflight[pending.model] -= 1
        budget = self.budgets[pending.model]  # nothing was sent: give the hold back
        budget.sent -= 1
        budget.spent_usd -= pending.hold_usd
        pending.done = True
        return True

    def _scored(self, pending: Pending, answer: Answer) -> Answer:
        if self.scorer is None or pending.item_id is None or not answer.ok:
            return answer
        try:
            verdict = self.scorer(pending.item_id, answer)
        except Exception:
            log.exception("shadow scorer failed on item %s", pending.item_id)
            verdict = None
        return Answer(answer.ok, answer.text, answer.tool_calls, verdict)

    def _maybe_resolve(self, pending: Pending) -> None:
        if pending.done or pending.primary is None or pending.shadow is None:
            return
        pending.done = True
        record = pending.shadow_record
        record.agreement = agreement(pending.primary, pending.shadow)
        self.agreements.labels(pending.model, record.upstream, record.agreement).inc()
        self._finish(record)

    async def drain(self) -> None:
        """Wait for shadow requests still running (shutdown, tests); those still waiting for a
        primary that has not ended are sent now."""
        for pending in list(self.waiting):
            pending.primary_in.set()
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
