"""Cost: what one request cost at the price table, and what a node's tokens cost per million.

Pure functions of records, prices, node figures and usage totals; no I/O. Price tables stay in the
config (`[prices.UPSTREAM]`, `[nodes.NAME]`); rows carry only token counts and the computed and
charged cost, never a copy of the table.

Request cost (an API upstream, USD)::

    (prompt - cached) * input + cached * cached_input + completion * output      (per 1e6 tokens)

`completion` already includes the reasoning tokens (OpenAI's usage convention), so reasoning is
billed once, at `output`. Cached prompt tokens are billed once, at `cached_input` (or at `input`
when the table has no cache-read rate) -- never also at `input`.

Node cost per million tokens. A node costs `cost_per_hour` on its basis (list, committed, fully
loaded); `utilisation` is the share of its hours the owner actually uses, so one *active* hour
costs `cost_per_hour / utilisation` (the reference report's economics: $3.08 list at 70% is $4.40
per active hour). The active hours in a window are measured, not assumed: the union of the
intervals during which the node's upstreams had a request in flight (`busy_hours`). The node's
cost for the window is then ``busy_hours * cost_per_hour / utilisation``, and it is divided by the
tokens its upstreams actually served in that window -- cached prefix reads included in the input
tokens (a prefix-cache hit is a token the node served cheaply, which is exactly what lowers its
cost per token).

Allocation between input and output. A node-hour is one cost that produced both kinds of token,
so any split is a rule, and this is the one used: an output token weighs `output_weight` input
tokens. The window's cost is divided over ``input + output_weight * output`` weighted tokens, so

    node $/M input  = cost / (input + w * output) * 1e6
    node $/M output = w * node $/M input
    node $/M blended = cost / (input + output) * 1e6        (the split does not change it)

By default `w` is the model's API price ratio ``output / input`` (the market's own relative
price of the two kinds, so the API/node ratio comes out the same for input, output and blended);
with no API price for the model, ``w = 1`` (every token costs the same).

API / node ratio, per model: what the model's API price table would charge for exactly the token
mix the node served (scaled by the measured charged/computed factor when the provider reported
`usage.cost`), divided by the node cost attributed to that model. Both legs see the same tokens,
so input-heavy and output-heavy traffic cannot bias it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.config import Config, Node, Price
from gateway.ledger.record import Record

MILLION = 1_000_000


def request_cost(record: Record, price: Price | None) -> float | None:
    """USD for one request at `price`, or None without a price (a node upstream, an unknown one)."""
    if price is None:
        return None
    prompt = max(record.prompt_tokens, 0)
    cached = min(max(record.cached_tokens, 0), prompt)
    completion = max(record.completion_tokens, 0)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    return (
        (prompt - cached) * price.input + cached * cached_rate + completion * price.output
    ) / MILLION


def drift(computed: float | None, charged: float | None) -> float | None:
    """Relative gap |computed - charged| / charged; None when either side is missing."""
    if computed is None or charged is None:
        return None
    if charged == 0:
        return 0.0 if computed == 0 else math.inf
    return abs(computed - charged) / abs(charged)


def drifted(record: Record, price: Price | None) -> bool:
    """Did the provider charge something other than the table says, beyond the price's threshold?"""
    if price is None:
        return False
    gap = drift(request_cost(record, price), record.charged_cost_usd)
    return gap is not None and gap > price.drift_threshold


def price_record(record: Record, config: Config) -> None:
    """Clamp impossible token counts, then fill `cost_usd` from the upstream's price (if any).

    Call once per record, before it is handed to the sinks, so the store and the metrics see the
    same cost.
    """
    record.check_invariants()
    if record.cost_usd is None and record.upstream is not None:
        record.cost_usd = request_cost(record, config.prices.get(record.upstream))


@dataclass(slots=True)
class Usage:
    """Totals for one (model, upstream) over a window, as the store aggregates them."""

    model: str
    upstream: str | None
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    charged_cost_usd: float = 0.0
    # Computed cost of just the requests that also carry a charged cost (for the charged factor).
    charged_basis_usd: float = 0.0
    truncated: int = 0  # every truncated answer, whatever cut it
    errors: int = 0
    estimated: int = 0
    client_capped: int = 0  # of the truncated, those that reached the request's own cap
    lane: str = "client"  # client | eval | shadow (`record.LANES`)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def busy_hours(intervals: Iterable[tuple[float, float]]) -> float:
    """Hours covered by the union of (start, end) intervals (seconds), in any order."""
    total = 0.0
    cur_start: float | None = None
    cur_end = 0.0
    for start, end in sorted(intervals):
        end = max(end, start)
        if cur_start is None or start > cur_end:
            if cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_start is not None:
        total += cur_end - cur_start
    return total / 3600.0


def active_hour_cost(node: Node) -> float:
    """USD for one hour the owner actually uses: cost per hour on its basis / utilisation."""
    return node.cost_per_hour / node.utilisation


@dataclass(frozen=True, slots=True)
class NodeCost:
    """A node's cost over a window and what it comes to per million tokens served."""

    cost_usd: float
    input_tokens: int
    output_tokens: int
    output_weight: float

    @property
    def usd_per_m(self) -> float | None:
        tokens = self.input_tokens + self.output_tokens
        return None if tokens == 0 else self.cost_usd / tokens * MILLION

    @property
    def usd_per_m_input(self) -> float | None:
        weighted = self.input_tokens + self.output_weight * self.output_tokens
        return None if weighted == 0 else self.cost_usd / weighted * MILLION

    @property
    def usd_per_m_output(self) -> float | None:
        per_input = self.usd_per_m_input
        return None if per_input is None else per_input * self.output_weight


def node_cost(
    node: Node, hours: float, input_tokens: int, output_tokens: int, output_weight: float = 1.0
) -> NodeCost:
    """Cost of `hours` active node-hours spread over the tokens served (see module docstring)."""
    return NodeCost(hours * active_hour_cost(node), input_tokens, output_tokens, output_weight)


def market_weight(price: Price | None) -> float:
    """Output-to-input weight from an API price table; 1 when there is none."""
    if price is None or price.input <= 0 or price.output <= 0:
        return 1.0
    return price.output / price.input


def api_bill(price: Price, prompt: int, cached: int, completion: int) -> float:
    """What `price` charges for a token mix (USD), cached tokens at the cache-read rate."""
    cached = min(cached, prompt)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    return (
        (prompt - cached) * price.input + cached * cached_rate + completion * price.output
    ) / MILLION


def api_price_for(config: Config, model: str) -> Price | None:
    """The API price of a model: the first priced upstream without a node in its route."""
    route = config.models.get(model)
    if route is None:
        return None
    for name in [*route.upstreams, *route.fallback]:
        try:
            upstream = config.upstream(name)
        except KeyError:
            continue
        if upstream.node is None and name in config.prices:
            return config.prices[name]
    return None


@dataclass(slots=True)
class ModelEconomics:
    """Per model: node cost per million tokens (in, out, blended), the API's for the same mix."""

    model: str
    node_usd: float = 0.0
    node_prompt: int = 0
    node_cached: int = 0
    node_completion: int = 0
    output_weight: float = 1.0
    api_usd_per_m: float | None = None
    api_bill_usd: float | None = None
    # node -> (USD attributed to this model, tokens this model got from it)
    by_node: dict[str, tuple[float, int]] = field(default_factory=dict)

    def node_usd_per_m_on(self, node: str) -> float | None:
        usd, tokens = self.by_node.get(node, (0.0, 0))
        return None if tokens == 0 else usd / tokens * MILLION

    @property
    def node_tokens(self) -> int:
        return self.node_prompt + self.node_completion

    @property
    def node_usd_per_m(self) -> float | None:
        t = self.node_tokens
        return None if t == 0 else self.node_usd / t * MILLION

    @property
    def node_usd_per_m_input(self) -> float | None:
        weighted = self.node_prompt + self.output_weight * self.node_completion
        return None if weighted == 0 else self.node_usd / weighted * MILLION

    @property
    def node_usd_per_m_output(self) -> float | None:
        per_input = self.node_usd_per_m_input
        return None if per_input is None else per_input * self.output_weight

    @property
    def ratio(self) -> float | None:
        """API / node for the same tokens; None without node traffic or an API price."""
        if self.api_bill_usd is None or self.node_usd <= 0:
            return None
        return self.api_bill_usd / self.node_usd


def _charged_factor(usage: Iterable[Usage]) -> float:
    charged = sum(u.charged_cost_usd for u in usage)
    basis = sum(u.charged_basis_usd for u in usage)
    return charged / basis if charged > 0 and basis > 0 else 1.0


def economics(
    config: Config, usage: Iterable[Usage], node_hours: Mapping[str, float]
) -> dict[str, ModelEconomics]:
    """Per-model node and API cost per million tokens over one window.

    `usage` is the window's per-(model, upstream) totals; `node_hours` the measured busy hours of
    each node (`busy_hours` of its upstreams' request intervals). A node's cost is shared between
    the models it served in proportion to their weighted tokens.
    """
    rows = list(usage)
    node_of = {u.name: u.node for u in config.upstreams}
    out: dict[str, ModelEconomics] = {}
    for model in sorted({r.model for r in rows}):
        price = api_price_for(config, model)
        api_rows = [
            r for r in rows if r.model == model and r.upstream and not node_of.get(r.upstream)
        ]
        out[model] = ModelEconomics(model, output_weight=market_weight(price))
        out[model].api_usd_per_m = _measured_api_per_m(api_rows)
    # Weighted tokens per node, per model.
    weights: dict[str, dict[str, float]] = {}
    for r in rows:
        node = node_of.get(r.upstream or "")
        if not node or r.model not in out:
            continue
        econ = out[r.model]
        econ.node_prompt += r.prompt_tokens
        econ.node_cached += r.cached_tokens
        econ.node_completion += r.completion_tokens
        usd, tokens = econ.by_node.get(node, (0.0, 0))
        econ.by_node[node] = (usd, tokens + r.tokens)
        w = r.prompt_tokens + econ.output_weight * r.completion_tokens
        weights.setdefault(node, {}).setdefault(r.model, 0.0)
        weights[node][r.model] += w
    for node, by_model in weights.items():
        total = sum(by_model.values())
        cost = node_hours.get(node, 0.0) * active_hour_cost(config.nodes[node])
        for model, w in by_model.items():
            share = cost * (w / total if total else 1.0 / len(by_model))
            out[model].node_usd += share
            _, tokens = out[model].by_node[node]
            out[model].by_node[node] = (share, tokens)
    for model, econ in out.items():
        price = api_price_for(config, model)
        if price is None or econ.node_tokens == 0:
            continue
        api_rows = [
            r for r in rows if r.model == model and r.upstream and not node_of.get(r.upstream)
        ]
        bill = api_bill(price, econ.node_prompt, econ.node_cached, econ.node_completion)
        econ.api_bill_usd = bill * _charged_factor(api_rows)
        econ.api_usd_per_m = econ.api_bill_usd / econ.node_tokens * MILLION
    return out


def _measured_api_per_m(rows: list[Usage]) -> float | None:
    """Blended $/M of API traffic: charged cost where reported, computed cost elsewhere."""
    tokens = sum(r.tokens for r in rows)
    if tokens == 0:
        return None
    usd = sum(r.cost_usd - r.charged_basis_usd + r.charged_cost_usd for r in rows)
    return usd / tokens * MILLION
