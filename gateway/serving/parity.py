"""Which upstreams of a route can be asked what its profile asks: parity seen from the config.

For every route with a profile, the profile's meaning (what a request that sets nothing itself
asks, gateway/serving/semantics.py) is said in each upstream's dialect the route may send to
(primaries, fallbacks, shape sub-routes, its shadow); every part an upstream cannot be told is a
`RouteGap`, accepted or not by the route's `accept_unequal`. `plumbline report health`, the
watchdog's config findings, `/health` and the console name them before a single request is sent;
at run time each answer names its own (gateway/serving/adapt.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config import Config
from gateway.config.routes import shape_upstreams
from gateway.serving.capability import carrier_of
from gateway.serving.dialect import Gap, accepted_keys, translate
from gateway.serving.profile import apply_profile
from gateway.serving.semantics import Semantics


@dataclass(frozen=True, slots=True)
class RouteGap:
    model: str
    gap: Gap
    accepted: bool

    def text(self) -> str:
        said = f"models.{self.model}: {self.gap}"
        return f"{said}, accepted (accept_unequal)" if self.accepted else said


def profile_body(config: Config, model: str) -> dict[str, Any] | None:
    """A chat body that sets nothing itself, as the route's profile fills it (None: none)."""
    profile = config.profile_for(model)
    return None if profile is None else apply_profile({}, profile, chat=True)


def route_upstreams(config: Config, model: str) -> list[str]:
    """Every upstream a route may send a request to, once each."""
    route = config.models[model]
    names = [*route.names, *shape_upstreams(config.models, model)]
    if route.shadow is not None:
        names.append(route.shadow.upstream)
    return list(dict.fromkeys(names))


def route_gaps(config: Config) -> list[RouteGap]:
    """Every part of a profiled route's meaning one of its upstreams cannot be told."""
    out: list[RouteGap] = []
    for model, route in config.models.items():
        body = profile_body(config, model)
        if body is None:
            continue
        meaning = Semantics.of(body, profiled=True)
        accepted = accepted_keys(route.accept_unequal)
        for name in route_upstreams(config, model):
            gaps, _ = translate(dict(body), meaning, carrier_of(config.upstream(name), config))
            out += [RouteGap(model, g, g.key in accepted) for g in gaps]
    return out
