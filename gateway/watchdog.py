"""Watchdogs: live checks per upstream that notice when what it serves has gone wrong.

Each finished record is one observation per check that applies to it:

    check               relevant responses                      flagged when
    truncation          completed (status 200)                  finish_reason = length
    reasoning_leak      completed, upstream has a parser        <think> text arrived in content
    degenerate          answer text sampled (`TextSampler`)     evals.tripwire.degeneration fires
    tool_call           responses with tool calls               invalid JSON, unknown tool, schema
    provider_mismatch   pinned provider route, provider known   another provider answered
    cost_drift          provider reported usage.cost            charged vs computed beyond threshold

`Watchdog` keeps the last `window` observations per (upstream, check) — bounded memory — and
trips a check when its flagged share reaches the threshold's `rate` over at least `min_samples`;
it recovers below `rate * recover_factor`. A trip sets `gateway_watchdog_tripped{upstream,check}`
to 1, counts `gateway_watchdog_trips_total`, and (with `[watchdog].demote`) demotes the upstream:
routing puts it behind every healthy, non-demoted one until all its checks recover.

Two checks come from the config, not from traffic, and are tripped from the start (never
demoting): `sampling_parity` (a provider upstream with `provider` routing but without
`require_parameters = true`, so the provider may silently drop top_k and friends) and
`thinking_mismatch` (two routes being compared — a shadow and its primary, eval targets, a gated
route's upstreams — whose profiles differ in enable_thinking or reasoning_effort).

`report_health` reads the same flags back from the store (`plumbline report health`).
"""

from __future__ import annotations

import io
import json
import logging
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from jsonschema import SchemaError
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for
from prometheus_client import CollectorRegistry, Counter, Gauge
from rich.console import Console
from rich.table import Table

from evals.tripwire import reply_degeneration
from gateway.config import Config, Profile, Upstream
from gateway.cost import drifted
from gateway.record import Record
from gateway.trust_config import CHECKS, WatchdogConfig

log = logging.getLogger("plumbline.watchdog")
Format = Literal["table", "csv", "json"]
_SLUG = re.compile(r"[^a-z0-9]+")


# ---- tool calls ------------------------------------------------------------------------------


class ToolCall(NamedTuple):
    name: str | None
    arguments: str


def _tool_schemas(request_tools: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for tool in request_tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            schemas[fn["name"]] = fn.get("parameters")
    return schemas


def check_tool_calls(
    request_tools: Sequence[dict[str, Any]] | None, calls: Sequence[ToolCall]
) -> list[str]:
    """Problems with the calls a model made, each "kind: detail" with kind one of
    invalid_json | unknown_tool | schema. Empty when every call is valid."""
    schemas = _tool_schemas(request_tools)
    problems: list[str] = []
    for call in calls:
        if call.name not in schemas:
            problems.append(f"unknown_tool: {call.name!r} was not offered")
            continue
        raw = call.arguments if call.arguments.strip() else "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append(f"invalid_json: {call.name}: {e.msg} at {e.pos}")
            continue
        if not isinstance(args, dict):
            problems.append(f"invalid_json: {call.name}: arguments are not a JSON object")
            continue
        schema = schemas[call.name]
        if not isinstance(schema, dict):
            continue
        cls = validator_for(schema)
        try:
            cls.check_schema(schema)
        except SchemaError:
            continue  # the client's schema is broken: not the model's fault
        error = best_match(cls(schema).iter_errors(args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            problems.append(f"schema: {call.name}: {where}: {error.message[:160]}")
    return problems


# ---- capturing answers -----------------------------------------------------------------------


class Capture:
    """What one request answered (choice 0): text when sampled, tool calls when tools were offered.

    The taps call `delta(index, delta)` per streamed chat choice (after the reasoning split),
    `message(index, message)` per non-streamed choice and `text(index, piece)` for completions;
    the relay calls `finish()` once before the record is handed on."""

    __slots__ = (
        "record",
        "tools",
        "keep_text",
        "max_chars",
        "_text",
        "_reasoning",
        "_size",
        "_calls",
    )

    def __init__(
        self,
        record: Record,
        tools: list[dict[str, Any]] | None,
        keep_text: bool,
        max_chars: int = 8192,
    ):
        self.record = record
        self.tools = tools
        self.keep_text = keep_text
        self.max_chars = max_chars
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._size = 0
        self._calls: dict[int, list[Any]] = {}

    def _keep(self, parts: list[str], piece: Any) -> None:
        if self.keep_text and isinstance(piece, str) and piece and self._size < self.max_chars:
            piece = piece[: self.max_chars - self._size]
            parts.append(piece)
            self._size += len(piece)

    def text(self, index: int, piece: Any) -> None:
        if index == 0:
            self._keep(self._text, piece)

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        if index != 0:
            return
        self._keep(self._text, delta.get("content"))
        self._keep(self._reasoning, delta.get("reasoning_content") or delta.get("reasoning"))
        for tc in delta.get("tool_calls") or ():
            slot = self._calls.setdefault(tc.get("index", 0), [None, []])
            fn = tc.get("function") or {}
            if fn.get("name"):
                slot[0] = fn["name"]
            args = fn.get("arguments")
            if isinstance(args, str) and sum(map(len, slot[1])) < 4 * self.max_chars:
                slot[1].append(args)

    def message(self, index: int, message: dict[str, Any]) -> None:
        if index != 0:
            return
        self._keep(self._text, message.get("content"))
        self._keep(self._reasoning, message.get("reasoning_content") or message.get("reasoning"))
        for i, tc in enumerate(message.get("tool_calls") or ()):
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            self._calls[i] = [fn.get("name"), [args if isinstance(args, str) else json.dumps(args)]]

    @property
    def answer(self) -> str:
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall(name, "".join(parts)) for _, (name, parts) in sorted(self._calls.items())]

    def finish(self) -> None:
        """Set the record's `sampled`, `degenerate` and `tool_call_error` flags."""
        record = self.record
        if self.keep_text and (self._text or self._reasoning):
            record.sampled = True
            record.degenerate = reply_degeneration(self.answer, self.reasoning) is not None
        calls = self.tool_calls()
        if calls:
            problems = check_tool_calls(self.tools, calls)
            record.tool_call_error = problems[0].split(":", 1)[0] if problems else None


class TextSampler:
    """Decides per request whether to capture its answer. Cheap when not: one random draw."""

    def __init__(
        self, rate: float, max_chars: int = 8192, rand: Callable[[], float] = random.random
    ):
        self.rate = rate
        self.max_chars = max_chars
        self._rand = rand

    @classmethod
    def from_config(cls, cfg: WatchdogConfig) -> TextSampler:
        return cls(cfg.sample_rate if cfg.enabled else 0.0, cfg.sample_chars)

    def start(
        self, record: Record, body: dict[str, Any], *, always: bool = False
    ) -> Capture | None:
        """A capture for this request, or None. `always`: a shadowed request (its answer is
        compared with the shadow's). Requests offering tools always get one (tool checks)."""
        tools = body.get("tools")
        keep = always or (self.rate > 0 and self._rand() < self.rate)
        if not keep and not tools:
            return None
        return Capture(record, tools if isinstance(tools, list) else None, keep, self.max_chars)


# ---- per-record flags from the config --------------------------------------------------------


def provider_slug(name: str) -> str:
    return _SLUG.sub("", name.lower())


def pinned_providers(upstream: Upstream) -> frozenset[str]:
    """Providers allowed to answer: `only`, or the first of `order` without fallbacks; empty when
    the route does not pin one."""
    p = upstream.provider
    if p is None:
        return frozenset()
    if p.only:
        return frozenset(provider_slug(x) for x in p.only)
    if p.order and p.allow_fallbacks is False:
        return frozenset({provider_slug(p.order[0])})
    return frozenset()


def annotate(record: Record, config: Config) -> None:
    """Set `provider_mismatch` and `cost_drift` (call after pricing, before the sinks)."""
    if record.upstream is None:
        return
    try:
        upstream = config.upstream(record.upstream)
    except KeyError:
        return
    pins = pinned_providers(upstream)
    if pins and record.provider:
        record.provider_mismatch = provider_slug(record.provider) not in pins
    record.cost_drift = drifted(record, config.prices.get(record.upstream))


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem found in the config itself."""

    check: str  # sampling_parity | thinking_mismatch
    upstream: str
    detail: str


def thinking_of(profile: Profile | None) -> tuple[bool | None, str | None]:
    if profile is None:
        return None, None
    return profile.thinking, profile.reasoning_effort


def compared_pairs(config: Config) -> list[tuple[str, Profile | None, str, Profile | None, str]]:
    """(label A, profile A, label B, profile B, upstream to flag) for every comparison the config
    sets up: eval targets pairwise, a route against each upstream's own profile (shadows and
    gated routes compare upstreams of one route)."""
    out: list[tuple[str, Profile | None, str, Profile | None, str]] = []
    targets = list(config.evals.targets)
    for i, a in enumerate(targets):
        for b in targets[i + 1 :]:
            for up in config.models[b].upstreams:
                out.append((a, config.profile_for(a), b, config.profile_for(b), up))
    for model, route in config.models.items():
        route_profile = config.profile_for(model)
        shadow = getattr(route, "shadow", None)
        names = [*route.upstreams, *([shadow.upstream] if shadow is not None else [])]
        for name in names:
            own = config.upstream(name).profile
            if own and route_profile is not None:
                out.append((model, route_profile, name, config.profiles[own], name))
    return out


def config_findings(config: Config) -> list[Finding]:
    """Sampling-parity and thinking-mode problems visible in the config alone."""
    found: list[Finding] = []
    for u in config.upstreams:
        if u.kind == "openai" and u.provider is not None and not u.provider.require_parameters:
            found.append(
                Finding(
                    "sampling_parity",
                    u.name,
                    "provider routing without require_parameters=true: a provider may ignore "
                    "sampling parameters (top_k, min_p, repetition_penalty) silently",
                )
            )
    for a, pa, b, pb, up in compared_pairs(config):
        if thinking_of(pa) != thinking_of(pb):
            found.append(
                Finding(
                    "thinking_mismatch",
                    up,
                    f"{a} thinks {thinking_of(pa)} but {b} thinks {thinking_of(pb)} "
                    "(enable_thinking, reasoning_effort)",
                )
            )
    return found


# ---- the live sink ---------------------------------------------------------------------------


def observations(record: Record, config: Config) -> dict[str, bool]:
    """Check -> flagged, for the checks that apply to this record."""
    try:
        upstream = config.upstream(record.upstream or "")
    except KeyError:
        return {}
    out: dict[str, bool] = {}
    completed = record.status == 200 and record.error_class is None
    if completed and record.door != "embeddings":
        out["truncation"] = record.truncated
        if upstream.reasoning == "parser":  # "gateway" upstreams are split on purpose
            out["reasoning_leak"] = record.reasoning_leak
    if record.sampled:
        out["degenerate"] = record.degenerate
    if record.tool_calls or record.tool_call_error:
        out["tool_call"] = record.tool_call_error is not None
    if record.provider and pinned_providers(upstream):
        out["provider_mismatch"] = record.provider_mismatch
    if record.charged_cost_usd is not None and record.upstream in config.prices:
        out["cost_drift"] = record.cost_drift
    return out


class Window:
    """The last `size` flags and how many of them are set."""

    __slots__ = ("flags", "hits")

    def __init__(self, size: int):
        self.flags: deque[bool] = deque(maxlen=size)
        self.hits = 0

    def add(self, flag: bool) -> None:
        if len(self.flags) == self.flags.maxlen:
            self.hits -= self.flags[0]
        self.flags.append(flag)
        self.hits += flag

    @property
    def n(self) -> int:
        return len(self.flags)

    @property
    def rate(self) -> float:
        return self.hits / len(self.flags) if self.flags else 0.0


@dataclass(slots=True)
class CheckState:
    window: Window
    tripped: bool = False
    trips: int = 0
    last_max_tokens: list[int | None] = field(default_factory=list)
    rate: Any = None  # the (upstream, check) child of the rate gauge


class Watchdog:
    """A `RecordSink`: windows per (upstream, check), trips, metrics, demotion."""

    def __init__(
        self,
        config: Config,
        cfg: WatchdogConfig | None = None,
        registry: CollectorRegistry | None = None,
        on_demote: Callable[[str, bool], None] | None = None,
    ):
        self.config = config
        self.cfg = cfg if cfg is not None else getattr(config, "watchdog", WatchdogConfig())
        self.on_demote = on_demote
        self.upstreams = {u.name for u in config.upstreams}
        self.states: dict[tuple[str, str], CheckState] = {}
        self.demoted: set[str] = set()
        r = registry if registry is not None else CollectorRegistry()
        self.tripped_gauge = Gauge(
            "gateway_watchdog_tripped",
            "1 while the watchdog check is tripped for the upstream.",
            ["upstream", "check"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.rate_gauge = Gauge(
            "gateway_watchdog_rate",
            "Flagged share of the check's sliding window.",
            ["upstream", "check"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.trips = Counter(
            "gateway_watchdog_trips",
            "Times a watchdog check tripped.",
            ["upstream", "check"],
            registry=r,
        )
        self.flagged = Counter(
            "gateway_watchdog_flagged",
            "Responses a watchdog check flagged.",
            ["upstream", "check"],
            registry=r,
        )
        self.findings = config_findings(config)
        for f in self.findings:
            self.tripped_gauge.labels(f.upstream, f.check).set(1)
            self.trips.labels(f.upstream, f.check).inc()
            log.warning("watchdog: %s on %s: %s", f.check, f.upstream, f.detail)

    def submit(self, record: Record) -> None:
        if not self.cfg.enabled or record.upstream not in self.upstreams:
            return
        try:
            annotate(record, self.config)  # idempotent; the app also calls it before the sinks
            for check, flag in observations(record, self.config).items():
                self._observe(record, check, flag)
            self._demotion(record.upstream or "")
        except Exception:
            log.exception("watchdog failed on record %s", record.request_id)

    def _observe(self, record: Record, check: str, flag: bool) -> None:
        upstream = record.upstream or ""
        key = (upstream, check)
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = CheckState(Window(self.cfg.window))
            state.rate = self.rate_gauge.labels(upstream, check)
        state.window.add(flag)
        if flag:
            self.flagged.labels(upstream, check).inc()
            if check == "truncation":
                state.last_max_tokens = [*state.last_max_tokens[-9:], record.max_tokens]
        th = self.cfg.threshold(check)
        w = state.window
        state.rate.set(w.rate)
        if not state.tripped and w.n >= th.min_samples and w.rate >= th.rate:
            state.tripped = True
            state.trips += 1
            self.trips.labels(upstream, check).inc()
            self.tripped_gauge.labels(upstream, check).set(1)
            log.warning(
                "watchdog: %s tripped on %s (%d of the last %d)", check, upstream, w.hits, w.n
            )
        elif state.tripped and w.rate < th.rate * self.cfg.recover_factor:
            state.tripped = False
            self.tripped_gauge.labels(upstream, check).set(0)
            log.info("watchdog: %s recovered on %s", check, upstream)

    def tripped(self, upstream: str) -> list[str]:
        live = [c for (u, c), s in self.states.items() if u == upstream and s.tripped]
        return live + [f.check for f in self.findings if f.upstream == upstream]

    def _demotion(self, upstream: str) -> None:
        demote = self.cfg.demote and any(
            s.tripped and self.cfg.threshold(c).demote
            for (u, c), s in self.states.items()
            if u == upstream
        )
        if demote == (upstream in self.demoted):
            return
        (self.demoted.add if demote else self.demoted.discard)(upstream)
        log.warning("watchdog: %s %s", upstream, "demoted" if demote else "restored")
        if self.on_demote is not None:
            self.on_demote(upstream, demote)

    def snapshot(self) -> dict[str, Any]:
        """For /health: per upstream, its checks' window rates and what is tripped."""
        out: dict[str, Any] = {}
        for (u, c), s in sorted(self.states.items()):
            entry = out.setdefault(u, {"demoted": u in self.demoted, "checks": {}})
            entry["checks"][c] = {
                "rate": round(s.window.rate, 4),
                "n": s.window.n,
                "tripped": s.tripped,
            }
        for f in self.findings:
            entry = out.setdefault(
                f.upstream, {"demoted": f.upstream in self.demoted, "checks": {}}
            )
            entry["checks"][f.check] = {"tripped": True, "detail": f.detail}
        return out


def demote_order(names: Sequence[str], demoted: set[str] | frozenset[str]) -> list[str]:
    """Routing's order with demoted upstreams moved behind the rest (stable)."""
    return [n for n in names if n not in demoted] + [n for n in names if n in demoted]


# ---- the health report -----------------------------------------------------------------------


@dataclass(slots=True)
class HealthRow:
    upstream: str
    requests: int
    completed: int
    rates: dict[str, float | None]
    samples: dict[str, int]
    capped_truncations: int  # truncations where the client had sent max_tokens
    tripped: list[str]


def _health_query(since: float, until: float) -> Any:
    from gateway.store import REQUESTS as t

    one = sa.literal(1)

    def count_if(cond: Any) -> Any:
        return sa.func.sum(sa.case((cond, one), else_=0))

    ok = sa.and_(t.c.status == 200, t.c.error_class.is_(None), t.c.door != "embeddings")
    return (
        sa.select(
            t.c.upstream,
            sa.func.count(),
            count_if(ok),
            count_if(sa.and_(ok, t.c.truncated == sa.true())),
            count_if(sa.and_(ok, t.c.truncated == sa.true(), t.c.max_tokens.is_not(None))),
            count_if(sa.and_(ok, t.c.reasoning_leak == sa.true())),
            count_if(t.c.sampled == sa.true()),
            count_if(t.c.degenerate == sa.true()),
            count_if(sa.or_(t.c.tool_calls > 0, t.c.tool_call_error.is_not(None))),
            count_if(t.c.tool_call_error.is_not(None)),
            count_if(t.c.provider.is_not(None)),
            count_if(t.c.provider_mismatch == sa.true()),
            count_if(t.c.charged_cost_usd.is_not(None)),
            count_if(t.c.cost_drift == sa.true()),
        )
        .where(t.c.time >= since, t.c.time < until, t.c.upstream.is_not(None))
        .group_by(t.c.upstream)
        .order_by(t.c.upstream)
    )


def health_rows(
    config: Config, raw: Iterable[Sequence[Any]], cfg: WatchdogConfig
) -> list[HealthRow]:
    findings = config_findings(config)
    rows = []
    for r in raw:
        name = r[0]
        try:
            upstream: Upstream | None = config.upstream(name)
        except KeyError:
            upstream = None
        v = [int(x or 0) for x in r[1:]]
        total, ok, trunc, capped, leak, sampled, degen, tooled, bad, provs, mism, charged, drift = v
        pinned = upstream is not None and bool(pinned_providers(upstream))
        parser = upstream is None or upstream.reasoning == "parser"
        pairs = {
            "truncation": (trunc, ok),
            "reasoning_leak": (leak, ok if parser else 0),
            "degenerate": (degen, sampled),
            "tool_call": (bad, tooled),
            "provider_mismatch": (mism, provs if pinned else 0),
            "cost_drift": (drift, charged),
        }
        rates = {c: (k / n if n else None) for c, (k, n) in pairs.items()}
        tripped = [
            c
            for c, (k, n) in pairs.items()
            if n >= cfg.threshold(c).min_samples and k / n >= cfg.threshold(c).rate
        ]
        tripped += [f.check for f in findings if f.upstream == name]
        rows.append(
            HealthRow(
                name, total, ok, rates, {c: n for c, (_, n) in pairs.items()}, capped, tripped
            )
        )
    return rows


def report_health(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Any = None,
    now: float | None = None,
    cfg: WatchdogConfig | None = None,
) -> str:
    """Per upstream: the watchdog rates over the window and the checks past their thresholds."""
    from gateway.report import parse_since
    from gateway.store import Store

    window = parse_since(since)
    now = time.time() if now is None else now
    cfg = cfg if cfg is not None else getattr(config, "watchdog", WatchdogConfig())
    own = store is None
    store = store or Store.from_config(config)
    try:
        with store.engine.connect() as conn:
            raw = list(conn.execute(_health_query(now - window, now)))
    finally:
        if own:
            store.close()
    rows = health_rows(config, raw, cfg or WatchdogConfig())
    findings = [asdict(f) for f in config_findings(config)]
    if fmt == "json":
        return json.dumps(
            {
                "since": now - window,
                "until": now,
                "rows": [asdict(r) for r in rows],
                "findings": findings,
            },
            indent=2,
        )
    if fmt == "csv":
        head = [
            "upstream",
            "requests",
            "completed",
            *(f"{c}_rate" for c in CHECKS),
            "capped_truncations",
            "tripped",
        ]
        lines = [",".join(head)]
        for r in rows:
            rates = ["" if r.rates[c] is None else f"{r.rates[c]:.6f}" for c in CHECKS]
            lines.append(
                ",".join(
                    [
                        r.upstream,
                        str(r.requests),
                        str(r.completed),
                        *rates,
                        str(r.capped_truncations),
                        ";".join(r.tripped),
                    ]
                )
            )
        return "\n".join(lines) + "\n"
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    table = Table(title=f"Upstream health, last {since}", title_justify="left")
    for name in ("upstream", "requests", *(f"{c} %" for c in CHECKS), "tripped"):
        table.add_column(name, justify="left" if name in ("upstream", "tripped") else "right")
    for r in rows:
        cells = [
            "–" if (rate := r.rates[c]) is None else f"{100 * rate:.1f} (n={r.samples[c]})"
            for c in CHECKS
        ]
        table.add_row(r.upstream, f"{r.requests:,}", *cells, ", ".join(r.tripped) or "–")
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    console.print(table)
    for f in findings:
        console.print(f"{f['check']} on {f['upstream']}: {f['detail']}")
    return console.file.getvalue()  # type: ignore[attr-defined]
