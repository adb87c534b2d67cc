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
the agreement is set on the shadow record and it goes to the sinks like any other record:

    tools_same / tools_different    both, or either, made tool calls: same names and arguments
                                    (arguments compared as parsed JSON; parallel calls in any order)
    exact / normalised / different  text answers: identical, identical after folding case,
                                    punctuation and whitespace, or neither
    verdict_same / verdict_different the request named an eval item (`x-plumbline-eval-item`)
                                    and a scorer was given: the two answers' verdicts
    primary_failed / shadow_failed  one side has no answer to compare

`report_shadow` reads the pairs back from the store (`plumbline report shadow`).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter
from rich.console import Console
from rich.table import Table

from gateway.config import Config, Price
from gateway.config.trust import ShadowConfig
from gateway.ledger.cost import request_cost
from gateway.ledger.record import Attempt, Record
from gateway.serving.accounting import MalformedStream, tap_body
from gateway.serving.adapt import Unfit, adapt
from gateway.serving.upstream import AttemptError, body_for, post
from gateway.serving.wire import Wire
from gateway.trust.capture import Capture, ToolCall

if TYPE_CHECKING:
    from gateway.ledger.store import Store

log = logging.getLogger("plumbline.shadow")
Format = Literal["table", "csv", "json"]
ITEM_HEADER = "x-plumbline-eval-item"
AGREE = ("exact", "normalised", "tools_same", "verdict_same")
DIFFER = ("different", "tools_different", "verdict_different")
FAILED = ("primary_failed", "shadow_failed")
_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


# ---- agreement (pure) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    ok: bool
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    verdict: str | None = None


def normalise(text: str) -> str:
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.casefold())).strip()


def text_agreement(a: str, b: str) -> str:
    if a == b:
        return "exact"
    return "normalised" if normalise(a) == normalise(b) else "different"


def _canonical(call: ToolCall) -> tuple[str, str]:
    try:
        args: Any = json.loads(call.arguments) if call.arguments.strip() else {}
        rendered = json.dumps(args, sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        rendered = "\x00raw:" + call.arguments  # unparsable: only an identical string matches
    return call.name or "", rendered


def tool_agreement(a: Sequence[ToolCall], b: Sequence[ToolCall]) -> str:
    same = sorted(map(_canonical, a)) == sorted(map(_canonical, b))
    return "tools_same" if same else "tools_different"


def agreement(primary: Answer, shadow: Answer) -> str:
    if not primary.ok:
        return "primary_failed"
    if not shadow.ok:
        return "shadow_failed"
    if primary.verdict is not None and shadow.verdict is not None:
        return "verdict_same" if primary.verdict == shadow.verdict else "verdict_different"
    if primary.tool_calls or shadow.tool_calls:
        return tool_agreement(primary.tool_calls, shadow.tool_calls)
    return text_agreement(primary.text, shadow.text)


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


@dataclass(slots=True)
class Pending:
    """One mirrored request: both sides, and the record that goes out once both are in."""

    model: str
    shadow_record: Record
    item_id: str | None = None
    primary: Answer | None = None
    shadow: Answer | None = None
    done: bool = False
    capture_chars: int = 65_536
    tools: list[dict[str, Any]] | None = field(default=None)
    # USD held against the daily budget until the shadow's own cost is known.
    hold_usd: float = 0.0


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
        r = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "gateway_shadow_requests",
            "Shadow mirroring decisions and outcomes.",
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
        if cfg is None or record.lane != "prod" or path != "/chat/completions":
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
        self._maybe_resolve(pending)

    async def _run(
        self, pending: Pending, cfg: ShadowConfig, path: str, body: dict[str, Any]
    ) -> None:
        record = pending.shadow_record
        day = self.budgets[pending.model].day
        if self._store is not None and not await self._reserve(pending, cfg, day):
            return
        upstream = self.config.upstream(cfg.upstream)
        capture = Capture(record, pending.tools, keep_text=True, max_chars=pending.capture_chars)
        started = time.perf_counter()
        outcome = "ok"
        try:
            # Said as the shadow upstream can serve it (gateway/serving/adapt.py), marked on its
            # record.
            profiled = self.config.profile_for(pending.model) is not None
            adapted = adapt(body, upstream, self.config.upstream_window(upstream), profiled)
            adapted.mark(record)
            async with asyncio.timeout(cfg.timeout_s):
                data = body_for(
                    upstream, adapted.body, False, thinking_cap=self.config.thinking_cap(upstream)
                )
                resp = await post(self._wire, upstream, path, data)
                try:
                    raw = await resp.read()
                finally:
                    resp.release()
            out = tap_body(record, raw, split_think=upstream.reasoning == "gateway")
            for i, choice in enumerate(orjson.loads(out).get("choices") or ()):
                capture.message(choice.get("index", i), choice.get("message") or {})
            record.status = 200
            capture.finish()
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
        finally:
            self.inflight[pending.model] -= 1
        elapsed = time.perf_counter() - started
        record.attempts.append(Attempt(upstream.name, outcome, record.status or None, elapsed))
        record.e2e_s = elapsed
        record.cost_usd = request_cost(record, self.config.prices.get(upstream.name))
        spent = record.charged_cost_usd if record.charged_cost_usd is not None else record.cost_usd
        settle = (spent or 0.0) - pending.hold_usd  # the hold is given back, the cost counted
        self.budgets[pending.model].spent_usd += settle
        if self._store is not None and settle:
            try:
                await asyncio.to_thread(self._store.shadow_spent, pending.model, day, settle)
            except Exception:
                log.exception("shadow: could not count $%.6f against %s", settle, pending.model)
        if outcome != "ok":
            self.requests.labels(pending.model, cfg.upstream, "failed").inc()
        answer = Answer(outcome == "ok", capture.answer, tuple(capture.tool_calls()))
        pending.shadow = self._scored(pending, answer)
        self._maybe_resolve(pending)

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
        """Wait for shadow requests still running (shutdown, tests)."""
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


# ---- the shadow report -----------------------------------------------------------------------


@dataclass(slots=True)
class ShadowRow:
    model: str
    primary: str | None
    shadow: str | None
    pairs: int
    agreements: dict[str, int]
    agree_rate: float | None  # over pairs where both answered
    agree_ci: tuple[float, float] | None
    primary_e2e_s: float | None
    shadow_e2e_s: float | None
    primary_tokens: int
    shadow_tokens: int
    primary_cost_usd: float
    shadow_cost_usd: float


def _shadow_query(since: float, until: float) -> Any:
    from gateway.ledger.store import REQUESTS

    s, p = REQUESTS.alias("s"), REQUESTS.alias("p")
    join = s.join(p, sa.and_(p.c.time == s.c.time, p.c.request_id == s.c.shadow_of))
    return (
        sa.select(
            s.c.model,
            p.c.upstream,
            s.c.upstream,
            s.c.agreement,
            sa.func.count(),
            sa.func.avg(p.c.e2e_s),
            sa.func.avg(s.c.e2e_s),
            sa.func.sum(p.c.completion_tokens),
            sa.func.sum(s.c.completion_tokens),
            sa.func.sum(sa.func.coalesce(p.c.charged_cost_usd, p.c.cost_usd, 0.0)),
            sa.func.sum(sa.func.coalesce(s.c.charged_cost_usd, s.c.cost_usd, 0.0)),
        )
        .select_from(join)
        .where(s.c.lane == "shadow", s.c.time >= since, s.c.time < until)
        .group_by(s.c.model, p.c.upstream, s.c.upstream, s.c.agreement)
    )


def shadow_rows(raw: Sequence[Sequence[Any]]) -> list[ShadowRow]:
    from evals.stats import wilson

    groups: dict[tuple[str, str | None, str | None], list[Sequence[Any]]] = {}
    for r in raw:
        groups.setdefault((r[0], r[1], r[2]), []).append(r)
    rows = []
    for (model, primary, shadow), parts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        counts = {str(r[3]): int(r[4]) for r in parts}
        n = sum(counts.values())

        def mean(i: int, parts: list[Sequence[Any]] = parts) -> float | None:
            vals = [(r[i], r[4]) for r in parts if r[i] is not None]
            w = sum(c for _, c in vals)
            return sum(v * c for v, c in vals) / w if w else None

        agree = sum(counts.get(a, 0) for a in AGREE)
        comparable = agree + sum(counts.get(d, 0) for d in DIFFER)
        rows.append(
            ShadowRow(
                model,
                primary,
                shadow,
                n,
                counts,
                agree / comparable if comparable else None,
                wilson(agree, comparable) if comparable else None,
                mean(5),
                mean(6),
                sum(int(r[7] or 0) for r in parts),
                sum(int(r[8] or 0) for r in parts),
                sum(float(r[9] or 0) for r in parts),
                sum(float(r[10] or 0) for r in parts),
            )
        )
    return rows


def report_shadow(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Any = None,
    now: float | None = None,
) -> str:
    """Per (model, primary, shadow): pairs, agreement with its interval, latency, tokens, cost."""
    from gateway.ledger.report import reading, span

    start, now = span(since, now)
    with reading(config, store) as db, db.engine.connect() as conn:
        rows = shadow_rows(list(conn.execute(_shadow_query(start, now))))
    if fmt == "json":
        return json.dumps(
            {"since": start, "until": now, "rows": [asdict(r) for r in rows]}, indent=2
        )
    if fmt == "csv":
        lines = [
            "model,primary,shadow,pairs,agree_rate,agree_lo,agree_hi,primary_e2e_s,"
            "shadow_e2e_s,primary_tokens,shadow_tokens,primary_cost_usd,shadow_cost_usd"
        ]
        for r in rows:
            lo, hi = r.agree_ci or ("", "")
            cells = [
                r.model,
                r.primary,
                r.shadow,
                r.pairs,
                r.agree_rate,
                lo,
                hi,
                r.primary_e2e_s,
                r.shadow_e2e_s,
                r.primary_tokens,
                r.shadow_tokens,
                r.primary_cost_usd,
                r.shadow_cost_usd,
            ]
            lines.append(",".join("" if c is None else str(c) for c in cells))
        return "\n".join(lines) + "\n"
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    table = Table(title=f"Shadow agreement, last {since}", title_justify="left")
    for name in (
        "model",
        "primary → shadow",
        "pairs",
        "agree %",
        "95% CI",
        "e2e s p/s",
        "tokens p/s",
        "cost $ p/s",
        "breakdown",
    ):
        table.add_column(
            name, justify="left" if name in ("model", "primary → shadow", "breakdown") else "right"
        )
    for r in rows:
        ci = "–" if r.agree_ci is None else f"{100 * r.agree_ci[0]:.0f}–{100 * r.agree_ci[1]:.0f}"
        e2e = "/".join("–" if v is None else f"{v:.2f}" for v in (r.primary_e2e_s, r.shadow_e2e_s))
        table.add_row(
            r.model,
            f"{r.primary} → {r.shadow}",
            str(r.pairs),
            "–" if r.agree_rate is None else f"{100 * r.agree_rate:.1f}",
            ci,
            e2e,
            f"{r.primary_tokens}/{r.shadow_tokens}",
            f"{r.primary_cost_usd:.4f}/{r.shadow_cost_usd:.4f}",
            ", ".join(f"{k} {v}" for k, v in sorted(r.agreements.items())),
        )
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]
