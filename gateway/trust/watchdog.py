"""Watchdogs: live checks per upstream that notice when what it serves has gone wrong.

Each finished record is one observation per check that applies to it:

    check               relevant responses                      flagged when
    truncation          completed (status 200), or a stream     cut by the upstream: length
                        the upstream cut (UpstreamCut,          before the request's own cap,
                        WireError)                              or without one, or no finish
                                                                at all (truncation.py)
    reasoning_leak      completed, upstream has a parser        <think> text arrived in content
    degenerate          answer text sampled (`capture.py`)      gateway.serving.degeneration fires
    tool_call           responses with tool calls               invalid JSON, unknown tool, schema
    provider_mismatch   pinned provider route, provider known   another provider answered
    cost_drift          provider reported usage.cost            charged vs computed beyond threshold
    unasked_reasoning   completed, the request asked not to     reasoning came back anyway (tokens
                        think (`asked_not_to_think`)            or text): the provider thinks
                                                                though thinking was off

`Watchdog` keeps the last `window` observations per (upstream, check) — bounded memory — and
trips a check when its flagged share reaches the threshold's `rate` over at least `min_samples`;
it recovers below `rate * recover_factor`. A trip sets `gateway_watchdog_tripped{upstream,check}`
to 1, counts `gateway_watchdog_trips_total`, and (with `[watchdog].demote`) demotes the upstream:
routing puts it behind every healthy, non-demoted one until all its checks recover. Gateways on
one store share their demotions (`demotions`, `gateway/edge/housekeeping.py: Demotions`): each
routes around what any of them demoted.

Three checks come from the config, not from traffic, and are tripped from the start (never
demoting): `sampling_parity` (an OpenRouter upstream whose config says
`require_parameters = false`, so the provider may silently drop top_k and friends; unset, the
gateway sends it true), `not_at_parity` (a profiled route's upstream that cannot be told part of
the profile's meaning: "api-b cannot be sent top_k=20 (kind openai)", gateway/serving/parity.py)
and `thinking_mismatch` (two routes being compared — a shadow and its primary, eval targets, a
gated route's upstreams — whose profiles differ in enable_thinking or reasoning_effort). A
difference a route accepts (`accept_unequal`) is shown as `accepted_unequal`, never tripped.

`gateway.reports.health.report_health` reads the same flags back from the store (`plumbline
report health`).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.config import Config, Profile, Upstream
from gateway.config.trust import WatchdogConfig
from gateway.ledger.cost import drifted
from gateway.ledger.record import Record
from gateway.ledger.truncation import CUT_CLASSES, cause
from gateway.serving.parity import route_gaps

log = logging.getLogger("plumbline.watchdog")
_SLUG = re.compile(r"[^a-z0-9]+")


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
    record.unasked_reasoning = record.thinking_off and record.reasoning_tokens > 0
    record.cost_drift = drifted(record, config.prices.get(record.upstream))


def asked_not_to_think(body: dict[str, Any]) -> bool:
    """Whether a request body (its profile applied) asks the model not to think: vLLM's
    `chat_template_kwargs.enable_thinking = false`, OpenRouter's `reasoning.enabled = false` or
    `reasoning.effort = "none"`, or `reasoning_effort = "none"`; and nothing in it asks to."""
    said: list[bool] = []
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
        said.append(not kwargs["enable_thinking"])
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict):
        if isinstance(reasoning.get("enabled"), bool):
            said.append(not reasoning["enabled"])
        if isinstance(reasoning.get("effort"), str):
            said.append(reasoning["effort"] == "none")
        if reasoning.get("max_tokens"):
            said.append(False)
    if isinstance(body.get("reasoning_effort"), str):
        said.append(body["reasoning_effort"] == "none")
    return bool(said) and all(said)


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem found in the config itself."""

    check: str  # sampling_parity | not_at_parity | accepted_unequal | thinking_mismatch
    upstream: str
    detail: str

    @property
    def trips(self) -> bool:
        """A problem (tripped from the start), not an accepted difference shown as a note."""
        return self.check != "accepted_unequal"


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
        if u.kind == "openai" and u.provider is not None and u.provider.require_parameters is False:
            found.append(
                Finding(
                    "sampling_parity",
                    u.name,
                    "provider routing with require_parameters = false: a provider may ignore "
                    "sampling parameters (top_k, min_p, repetition_penalty) silently",
                )
            )
    for rg in route_gaps(config):
        check = "accepted_unequal" if rg.accepted else "not_at_parity"
        found.append(Finding(check, rg.gap.upstream, rg.text()))
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
    # A stream the upstream cut before it finished is an answer it truncated, not only an error.
    cut = record.error_class in CUT_CLASSES
    if (completed or cut) and record.door != "embeddings":
        # A client's own cap reached is the answer it asked for, not the upstream failing.
        out["truncation"] = cause(record) == "upstream"
    if completed and record.door != "embeddings" and upstream.reasoning == "parser":
        out["reasoning_leak"] = record.reasoning_leak  # "gateway" upstreams are split on purpose
    if record.sampled:
        out["degenerate"] = record.degenerate
    if record.tool_calls or record.tool_call_error:
        out["tool_call"] = record.tool_call_error is not None
    if record.provider and pinned_providers(upstream):
        out["provider_mismatch"] = record.provider_mismatch
    if record.charged_cost_usd is not None and record.upstream in config.prices:
        out["cost_drift"] = record.cost_drift
    if completed and record.thinking_off:
        out["unasked_reasoning"] = record.unasked_reasoning
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
    last_max_tokens: list[int | None] = field(default_factory=list)
    rate: Any = None  # the (upstream, check) child of the rate gauge
    shown: float | None = None  # what that child was last set to


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
            if not f.trips:
                log.info("watchdog: %s on %s: %s", f.check, f.upstream, f.detail)
                continue
            self.tripped_gauge.labels(f.upstream, f.check).set(1)
            self.trips.labels(f.upstream, f.check).inc()
            log.warning("watchdog: %s on %s: %s", f.check, f.upstream, f.detail)

    def submit(self, record: Record) -> None:
        if not self.cfg.enabled or record.upstream not in self.upstreams:
            return
        try:
            annotate(record, self.config)  # idempotent; the app also calls it before the sinks
            turned = False
            for check, flag in observations(record, self.config).items():
                turned = self._observe(record, check, flag) or turned
            if turned:  # only a check's trip or recovery changes what is demoted
                self._demotion(record.upstream or "")
        except Exception:
            log.exception("watchdog failed on record %s", record.request_id)

    def _observe(self, record: Record, check: str, flag: bool) -> bool:
        """Count the flag; True when the check tripped or recovered with it."""
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
        rate = w.rate
        if rate != state.shown:  # most records leave it as it was (0 while nothing is flagged)
            state.rate.set(rate)
            state.shown = rate
        if not state.tripped and w.n >= th.min_samples and w.rate >= th.rate:
            state.tripped = True
            self.trips.labels(upstream, check).inc()
            self.tripped_gauge.labels(upstream, check).set(1)
            log.warning(
                "watchdog: %s tripped on %s (%d of the last %d)", check, upstream, w.hits, w.n
            )
            return True
        if state.tripped and w.rate < th.rate * self.cfg.recover_factor:
            state.tripped = False
            self.tripped_gauge.labels(upstream, check).set(0)
            log.info("watchdog: %s recovered on %s", check, upstream)
            return True
        return False

    def tripped(self, upstream: str) -> list[str]:
        live = [c for (u, c), s in self.states.items() if u == upstream and s.tripped]
        return live + [f.check for f in self.findings if f.upstream == upstream and f.trips]

    def _demoting(self, upstream: str) -> list[str]:
        """The tripped checks of `upstream` that demote it (with `[watchdog].demote`)."""
        if not self.cfg.demote:
            return []
        return sorted(
            c
            for (u, c), s in self.states.items()
            if u == upstream and s.tripped and self.cfg.threshold(c).demote
        )

    def _demotion(self, upstream: str) -> None:
        demote = bool(self._demoting(upstream))
        if demote == (upstream in self.demoted):
            return
        (self.demoted.add if demote else self.demoted.discard)(upstream)
        log.warning("watchdog: %s %s", upstream, "demoted" if demote else "restored")
        if self.on_demote is not None:
            self.on_demote(upstream, demote)

    def demotions(self) -> dict[str, list[str]]:
        """What this watchdog demotes: upstream -> the tripped checks that demote it."""
        return {u: self._demoting(u) for u in sorted(self.demoted)}

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
            said = entry["checks"].get(f.check, {}).get("detail")
            detail = f"{said}; {f.detail}" if said else f.detail
            entry["checks"][f.check] = {"tripped": f.trips, "detail": detail}
        return out
