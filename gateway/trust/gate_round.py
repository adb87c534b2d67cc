"""What a gate round's results decide: the route's decision and one per task shape, and the
prices they weigh.

`round_decisions` groups the round's results by the upstream each arm pinned, pairs the
control's two runs into the noise floor, decides the route (gateway/trust/gate.py `decide`),
marks the upstreams the tripwire kept out, and decides each shape with a sub-route of its own.
`route_prices` is USD per million tokens per upstream: the gate's own figures, else the price
table (input and output averaged), else the node's measured cost for this model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gateway.config import Config, RouteConfig
from gateway.config.routes import shape_candidates, shape_upstreams
from gateway.config.trust import GateConfig
from gateway.trust.gate import SHAPE_FAMILIES, GateDecision, control_pair, decide, decide_shapes
from gateway.trust.rounds import refused_by_tripwire

# evals is the optional [evals] extra: its imports stay inside the functions that need them,
# so the gateway starts without it (tests/gateway/test_without_evals.py).
if TYPE_CHECKING:
    from evals.result import ItemResult

log = logging.getLogger("plumbline.schedule")


def round_decisions(
    model: str,
    routes: Mapping[str, RouteConfig],
    control: str,
    arms: Sequence[tuple[str, str]],
    results: Sequence[ItemResult],
    prices: dict[str, float | None],
    failed: dict[str, str],
) -> tuple[GateDecision, list[GateDecision]]:
    """The route's decision from one round's `results` (`arms`: label -> pinned upstream;
    `failed`: the upstreams the tripwire kept out, and why), and one per shape."""
    from evals.stats import PairingError

    gate_cfg = routes[model].gate or GateConfig()
    by_label: dict[str, list[ItemResult]] = {}
    for r in results:
        by_label.setdefault(r.target, []).append(r)
    upstream_of = dict(arms)
    primary = {
        upstream_of[label]: rs for label, rs in by_label.items() if not label.endswith("#control")
    }
    second = by_label.get(f"{model}@{control}#control", [])
    controls = []
    try:
        controls.append(control_pair(control, primary.get(control, []), second))
    except PairingError as e:
        log.warning("gate %s: no usable control pair (%s)", model, e)
    settings: dict[str, Any] = {
        "alpha": gate_cfg.alpha,
        "min_items": gate_cfg.min_items,
        "detect_gap": gate_cfg.detect_gap,
        "power": gate_cfg.power,
    }
    decision = decide(model, primary, controls or None, prices, **settings)
    shaped = decide_shapes(
        model,
        shape_candidates(routes, model, SHAPE_FAMILIES),
        primary,
        (control, primary.get(control, []), second),
        prices,
        **settings,
    )
    return refused_by_tripwire(decision, failed), list(shaped)


def route_prices(
    config: Config, model: str, economics: Mapping[str, Any]
) -> dict[str, float | None]:
    """USD per million tokens per upstream of `model`'s route and its shapes (`economics`:
    per-model node economics, `gateway.ledger.window.window_economics`)."""
    route = config.models[model]
    overrides = route.gate.prices if route.gate else {}
    out: dict[str, float | None] = {}
    for name in [*route.upstreams, *shape_upstreams(config.models, model)]:
        upstream = config.upstream(name)
        price = config.prices.get(name)
        if name in overrides:
            out[name] = overrides[name]
        elif price is not None:
            out[name] = (price.input + price.output) / 2
        elif upstream.node and model in economics:
            out[name] = economics[model].node_usd_per_m_on(upstream.node)
        else:
            out[name] = None
    return out
