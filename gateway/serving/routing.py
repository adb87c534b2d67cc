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
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.config import RouteConfig


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
