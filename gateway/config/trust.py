"""Config of the trust features: watchdog thresholds, shadow mirroring, the quality gate.

    [watchdog]                  live checks per upstream (gateway/trust/watchdog.py)
    [watchdog.truncation]       one `Threshold` per check: rate over a window, minimum samples
    [models.NAME.shadow]        mirror a sampled share of a route's traffic
    (gateway/trust/shadow.py)
    [models.NAME.gate]          "cheapest within the noise floor" (gateway/trust/gate.py)

Same rules as gateway/config/frozen.py: frozen, unknown keys are errors. `cross_check` names every
problem with the names of the rest of the config (the config module calls it from its validator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from gateway.config.frozen import Frozen, Name

CHECKS = (
    "truncation",
    "reasoning_leak",
    "degenerate",
    "tool_call",
    "provider_mismatch",
    "cost_drift",
    "unasked_reasoning",
)
# Checks found in the config itself, not in traffic: tripped from the start, never demote.
CONFIG_CHECKS = ("sampling_parity", "thinking_mismatch")


class Threshold(Frozen):
    """A check trips when `rate` or more of the last `window` relevant responses are flagged,
    once at least `min_samples` were seen; it recovers below `rate * recover_factor`."""

    # Share of flagged responses in the window at which the check trips.
    rate: float = Field(gt=0, le=1)
    # Responses seen before the check may trip.
    min_samples: int = Field(20, ge=1)
    # Demote the upstream in routing while this check is tripped (when [watchdog].demote is on).
    demote: bool = True


class WatchdogConfig(Frozen):
    """Live checks per upstream on the answers it gives (gateway/trust/watchdog.py)."""

    # Run the checks at all.
    enabled: bool = True
    # Responses remembered per (upstream, check): the sliding window.
    window: int = Field(200, ge=1, le=100_000)
    # Tripped checks push the upstream behind healthy ones in routing until they recover.
    demote: bool = False
    recover_factor: float = Field(0.5, ge=0, le=1)
    # Share of responses whose answer text is captured and checked for degeneration.
    sample_rate: float = Field(0.05, ge=0, le=1)
    # Characters of answer text kept per sampled response (the detector needs only a window).
    sample_chars: int = Field(8192, ge=256)
    truncation: Threshold = Threshold(rate=0.2)
    reasoning_leak: Threshold = Threshold(rate=0.05, min_samples=10)
    degenerate: Threshold = Threshold(rate=0.05, min_samples=10)
    tool_call: Threshold = Threshold(rate=0.1, min_samples=10)
    provider_mismatch: Threshold = Threshold(rate=0.01, min_samples=5)
    cost_drift: Threshold = Threshold(rate=0.05, min_samples=10, demote=False)
    unasked_reasoning: Threshold = Threshold(rate=0.05, min_samples=5)

    def threshold(self, check: str) -> Threshold:
        if check not in CHECKS:
            raise KeyError(check)
        threshold: Threshold = getattr(self, check)
        return threshold


class ShadowConfig(Frozen):
    """Mirror a sampled share of a route's live requests to another upstream."""

    # The upstream that gets the copies.
    upstream: Name
    # Share of the route's requests mirrored (0 < fraction <= 1).
    fraction: float = Field(gt=0, le=1)
    # Shadow requests in flight at once; a request finding the cap full is not mirrored.
    max_concurrency: int = Field(2, ge=1)
    # Per UTC day; whichever runs out first stops mirroring until the next day. None = no limit.
    budget_usd_per_day: float | None = Field(None, ge=0)
    budget_requests_per_day: int | None = Field(None, ge=0)
    timeout_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _some_budget(self) -> ShadowConfig:
        if self.budget_usd_per_day is None and self.budget_requests_per_day is None:
            raise ValueError("a shadow needs budget_usd_per_day or budget_requests_per_day")
        return self


class GateConfig(Frozen):
    """Route policy "cheapest within the noise floor"."""

    # The upstream run twice for the noise-floor control (default: the route's first).
    control: Name | None = None
    alpha: float = Field(0.05, gt=0, lt=1)
    # Fewer paired items than this: no switch, the best scorer keeps the traffic.
    min_items: int = Field(30, ge=1)
    # Rounds sized to decide (docs/rounds.md): the accuracy gap a round must be able to tell
    # apart, with this power at `alpha`; a cheaper upstream whose comparison cannot tell that
    # gap apart is not proven within the floor.
    detect_gap: float = Field(0.05, gt=0, le=1)
    power: float = Field(0.8, gt=0, lt=1)
    # The discordance (share of items two arms answer differently) a route's first round is
    # planned for; later rounds use what the last decision observed.
    discordance: float = Field(0.15, gt=0, le=1)
    # Paired items a scheduled round asks: None sizes it from the above, at most max_round_items.
    round_items: int | None = Field(None, ge=1)
    max_round_items: int = Field(2000, ge=1)
    # USD per million tokens per upstream, overriding the price table / measured node cost.
    prices: dict[Name, float] = Field(default_factory=dict)


def cross_check(models: Mapping[str, Any], known: set[str]) -> list[str]:
    """Problems in the routes' (`models`) shadow and gate sections naming upstreams not in
    `known` or not in the route (empty when none)."""
    problems: list[str] = []
    for model, route in models.items():
        shadow: ShadowConfig | None = getattr(route, "shadow", None)
        if shadow is not None:
            if shadow.upstream not in known:
                problems.append(f"models.{model}.shadow.upstream: unknown {shadow.upstream!r}")
            elif shadow.upstream in route.upstreams:
                problems.append(f"models.{model}.shadow.upstream: already a primary")
        gate: GateConfig | None = getattr(route, "gate", None)
        if gate is not None:
            members = {*route.upstreams, *route.fallback}
            for ref in [*([gate.control] if gate.control else []), *gate.prices]:
                if ref not in members:
                    problems.append(f"models.{model}.gate: {ref!r} is not in the route")
    return problems
