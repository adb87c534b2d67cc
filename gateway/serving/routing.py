"""Routing policy: a pure function from (route, request features, upstream state) to candidates.

No I/O and no clocks of its own: the caller passes a snapshot of upstream state and `now`, so the
policy is tested with plain values. The returned list is the order dispatch tries upstreams in:

1. the primaries that are available (healthy, not cooling down, not saturated), ordered by the
   route's policy — or by the session's rendezvous hash when the request names a session;
2. the route's fallback upstreams that are available, in configured order;
   in 1 and 2 an upstream a watchdog demoted (gateway/trust/watchdog.py) goes after every available
   one that is not demoted, keeping its relative order;
3. only when nothing at all is available: every upstream, least recently failed first, so a
   request is still tried rather than refused while all upstreams are marked down.

`plan` is the whole route decision dispatch asks for: the shape's sub-route (gateway/serving/
shape.py), the candidates above, the eval lane's pin, the quality gate's choice first, and the
upstreams whose window the prompt certainly does not fit dropped (`fitting`). `give_up` decides
what a request that no attempt served gets. Dispatch only executes the attempts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.config import Config, RouteConfig
from gateway.errors import (
    AllUpstreamsFailed,
    ContextExceeded,
    GatewayError,
    Unfit,
    UpstreamTimeout,
    UpstreamUnavailable,
)


@dataclass(frozen=True, slots=True)
class UpstreamView:
    """What routing may know about one upstream at one instant."""

    name: str
    inflight: int = 0
    healthy: bool = True
    cooling_until: float = 0.0
    weight: float = 1.0
    max_inflight: int = 0  # 0 = unlimited
    demoted: bool = False  # a watchdog check is tripped: serve only when nothing better is up

    def available(self, now: float) -> bool:
        if not self.healthy or self.cooling_until > now:
            return False
        return not (self.max_inflight and self.inflight >= self.max_inflight)


@dataclass(frozen=True, slots=True)
class Features:
    """What routing may know about the request."""

    session: str | None = None
    prefix_owner: str | None = None  # the replica that served the longest known prefix
    rand: float = 0.0  # uniform [0, 1), drawn by the caller (weighted split, tie breaking)


def _least_loaded(views: Sequence[UpstreamView], rand: float) -> list[UpstreamView]:
    # Rotate the starting point by `rand` so ties are spread instead of piling onto the first.
    n = len(views)
    start = int(rand * n) if n else 0
    rotated = [views[(start + i) % n] for i in range(n)]
    return sorted(rotated, key=lambda v: v.inflight)


def _rendezvous(views: Sequence[UpstreamView], session: str) -> list[UpstreamView]:
    def score(v: UpstreamView) -> bytes:
        return hashlib.blake2b(f"{session}\x00{v.name}".encode(), digest_size=8).digest()

    return sorted(views, key=score, reverse=True)


def _weighted(views: Sequence[UpstreamView], rand: float) -> list[UpstreamView]:
    total = sum(v.weight for v in views)
    if total <= 0:
        return list(views)
    point = rand * total
    for i, v in enumerate(views):
        point -= v.weight
        if point < 0:
            return [v, *views[:i], *views[i + 1 :]]
    return list(views)


def order_primaries(
    route: RouteConfig,
    views: Sequence[UpstreamView],
    features: Features,
    overload_margin: int,
) -> list[UpstreamView]:
    if not views:
        return []
    if features.session:
        return _rendezvous(views, features.session)
    if route.policy == "weighted":
        return _weighted(views, features.rand)
    ordered = _least_loaded(views, features.rand)
    if route.policy == "prefix_affinity" and features.prefix_owner:
        owner = next((v for v in views if v.name == features.prefix_owner), None)
        if owner is not None and owner.inflight - ordered[0].inflight <= overload_margin:
            ordered.remove(owner)
            ordered.insert(0, owner)
    return ordered


def candidates(
    route: RouteConfig,
    state: dict[str, UpstreamView],
    features: Features,
    now: float,
    overload_margin: int = 8,
) -> list[str]:
    """Ordered upstream names to try for one request."""
    primaries = [state[n] for n in route.upstreams if n in state]
    fallbacks = [state[n] for n in route.fallback if n in state]
    up = [v for v in primaries if v.available(now)]
    ordered = [v.name for v in order_primaries(route, up, features, overload_margin)]
    ordered += [v.name for v in fallbacks if v.available(now) and v.name not in ordered]
    if ordered:
        return [n for n in ordered if not state[n].demoted] + [
            n for n in ordered if state[n].demoted
        ]
    everyone = {v.name: v for v in [*primaries, *fallbacks]}
    return [v.name for v in sorted(everyone.values(), key=lambda v: v.cooling_until)]


def wants_affinity(route: RouteConfig, lane: str) -> bool:
    """Whether a request follows and plants prefixes: eval traffic does neither (it must not
    evict production's)."""
    return route.policy == "prefix_affinity" and lane == "client" and len(route.names) > 1


def gate_first(names: Sequence[str], chosen: str | None) -> list[str]:
    """Candidates with the quality gate's choice first (unchanged without one, or when the
    choice is not among them)."""
    if chosen is None or chosen not in names:
        return list(names)
    return [chosen, *(n for n in names if n != chosen)]


def fitting(
    names: Sequence[str],
    prompt_low: int,
    windows: Mapping[str, int | None],
    counted: Collection[str] = (),
) -> tuple[list[str], list[tuple[str, int]]]:
    """(the upstreams whose window may hold the prompt, (name, window) of those it certainly
    does not: at least `prompt_low` tokens by the gateway's count, adapt.py's refusal count).
    Upstreams in `counted` are the attempt's to decide: their tokenizer counts the prompt."""
    fit: list[str] = []
    small: list[tuple[str, int]] = []
    for name in names:
        window = windows.get(name)
        if window is not None and prompt_low >= window and name not in counted:
            small.append((name, window))
        else:
            fit.append(name)
    return fit, small


def too_long(prompt_low: int, small: Sequence[tuple[str, int]], param: str) -> ContextExceeded:
    """The 400 of a prompt no upstream of its route can hold, naming every size."""
    ordered = sorted(small, key=lambda named: (named[1], named[0]))
    sizes = ", ".join(f"{name!r} serves {window}" for name, window in ordered)
    largest = max(window for _, window in small)
    return ContextExceeded(
        f"prompt is too long: {prompt_low} tokens > {largest} maximum (at least {prompt_low} "
        f"tokens by the gateway's count; no upstream of this route holds it: {sizes} tokens).",
        param=param,
    )


def shaped(config: Config, model: str, shape: str) -> RouteConfig:
    """`model`'s route as a request of `shape` sees it: the shape's sub-route (its upstreams,
    or another route's) as the primaries, the route's fallbacks after them. Unchanged for a
    shape without a rule."""
    route = config.models[model]
    sub = route.shapes.upstreams_for(shape, config.models) if route.shapes else None
    if not sub:
        return route
    fallback = [f for f in route.fallback if f not in sub]
    return route.model_copy(update={"upstreams": list(sub), "fallback": fallback})


@dataclass(frozen=True, slots=True)
class Ask:
    """What one request brings to the route decision besides upstream state."""

    features: Features = Features()
    pin: str | None = None  # the eval lane's x-plumbline-upstream
    chosen: str | None = None  # the quality gate's latest choice for (route, shape)
    prompt_low: int = 0
    windows: Mapping[str, int | None] = field(default_factory=dict)
    counted: Collection[str] = ()  # upstreams whose tokenizer, not the bytes, decides the fit
    param: str = "messages"
    model: str = ""


def plan(
    route: RouteConfig,
    state: dict[str, UpstreamView],
    ask: Ask,
    now: float,
    overload_margin: int = 8,
) -> list[str]:
    """The upstreams one request is tried on, in order. Raises the client's 400 when the prompt
    certainly fits none of them, `UpstreamUnavailable` when the route has none."""
    if ask.pin is not None:
        return [ask.pin]  # an eval of one upstream must measure that upstream
    if len(route.names) == 1:
        names = list(route.names)  # what `candidates` returns for one upstream, in any state
    else:
        names = candidates(route, state, ask.features, now, overload_margin)
    if route.policy == "cheapest_within_floor":
        names = gate_first(names, ask.chosen)
    fit, small = fitting(names, ask.prompt_low, ask.windows, ask.counted)
    if small and not fit:
        raise too_long(ask.prompt_low, small, ask.param)
    if not fit:
        raise UpstreamUnavailable(f"no upstream is configured for model {ask.model!r}")
    return fit


@dataclass(slots=True)
class Tried:
    """What the attempts of one request came to, for `give_up`."""

    causes: list[str] = field(default_factory=list)
    unfit: list[Unfit] = field(default_factory=list)  # could not serve it as asked (adapt.py)
    timed_out: bool = False

    def refused(self, error: Unfit) -> None:
        self.unfit.append(error)
        self.causes.append(error.message)

    def failed(self, message: str, outcome: str) -> None:
        self.causes.append(message)
        self.timed_out = self.timed_out or outcome in ("ttft_timeout", "timeout")


def give_up(model: str, tried: Tried) -> GatewayError:
    """The error of a request no candidate served: the client's 400 when none failed (none could
    serve it as asked), else a timeout or "every upstream failed" naming each cause."""
    if tried.unfit and len(tried.unfit) == len(tried.causes):
        return tried.unfit[0]
    message = f"every upstream for {model!r} failed: " + " | ".join(tried.causes)
    return (UpstreamTimeout if tried.timed_out else AllUpstreamsFailed)(message, tried.causes)
