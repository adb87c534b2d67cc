"""What each arm of an eval cost, and the quality-against-cost frontier.

Two sources of an item's cost, never mixed up and never guessed:

- the gateway's own per-request cost (`x-plumbline-cost-usd`, from its price table), which the
  runner keeps on the item (`cost_basis` "price");
- for a self-hosted (node) upstream, which has no price table, node-hours
  (`price_nodes`, `cost_basis` "node-hours"): the node's `[nodes.NAME]` cost per active hour
  (`gateway.ledger.cost.active_hour_cost`: cost_per_hour / utilisation) times the hours the run kept
  it busy — the union of the request intervals (`started`, `latency_s`) of every item its
  upstreams answered, across every arm and run given (`gateway.ledger.cost.busy_hours`) — shared
  between those items in proportion to their tokens (prompt + output). Four requests in flight
  at once share one hour; nothing else the node served in that time is seen, so this is the
  eval's own use of the node.

An arm none of whose items has a cost has cost *unknown*: the report says so, and the arm is left
off the frontier chart with a note, never plotted at $0. $/M is the arm's total cost over the
output tokens of its priced items; accuracy is over every item (`evals.stats`).

The frontier: arms sorted by $/M; an arm is on it when no cheaper (or equally cheap) arm is at
least as accurate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from evals.result import ItemResult
from evals.stats import Summary, summarise
from gateway.ledger.cost import active_hour_cost, busy_hours

if TYPE_CHECKING:
    from gateway.config import Config, Node

MILLION = 1_000_000


def node_map(config: Config) -> tuple[dict[str, str], dict[str, Node]]:
    """(upstream -> node, node -> its [nodes.NAME] figures) from a gateway config."""
    node_of = {u.name: u.node for u in config.upstreams if u.node}
    return node_of, dict(config.nodes)


def price_nodes(
    results: Sequence[ItemResult], node_of: Mapping[str, str], nodes: Mapping[str, Node]
) -> list[ItemResult]:
    """`results` with a node-hours cost on every unpriced item a node's upstream answered
    (with its timing known); every other item unchanged (see the module doc)."""
    served: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(results):
        node = node_of.get(r.upstream)
        timed = r.started is not None and r.latency_s is not None
        if r.cost is None and node is not None and node in nodes and timed:
            served[node].append(i)
    out = list(results)
    for node, idxs in served.items():
        hours = busy_hours(
            (out[i].started or 0.0, (out[i].started or 0.0) + (out[i].latency_s or 0.0))
            for i in idxs
        )
        usd = hours * active_hour_cost(nodes[node])
        weights = [(out[i].prompt_tokens or 0) + (out[i].output_tokens or 0) for i in idxs]
        total = sum(weights)
        for i, w in zip(idxs, weights, strict=True):
            share = usd * (w / total if total else 1.0 / len(idxs))
            out[i] = replace(out[i], cost=share, cost_basis="node-hours")
    return out


@dataclass(frozen=True, slots=True)
class ArmCost:
    label: str
    items: int
    priced: int
    usd: float
    output_tokens: int  # of the priced items
    bases: tuple[str, ...]
    quality: Summary

    @property
    def known(self) -> bool:
        return self.priced > 0 and self.output_tokens > 0

    @property
    def usd_per_m_output(self) -> float | None:
        return MILLION * self.usd / self.output_tokens if self.known else None


def arm_costs(arms: Mapping[str, Sequence[ItemResult]]) -> dict[str, ArmCost]:
    out = {}
    for label, rs in arms.items():
        priced = [r for r in rs if r.cost is not None]
        out[label] = ArmCost(
            label=label,
            items=len(rs),
            priced=len(priced),
            usd=sum(r.cost or 0.0 for r in priced),
            output_tokens=sum(r.output_tokens or 0 for r in priced),
            bases=tuple(sorted({r.cost_basis or "price" for r in priced})),
            quality=summarise(rs),
        )
    return out


def frontier(costs: Mapping[str, ArmCost]) -> set[str]:
    """The arms no cheaper-or-equal arm matches or beats on accuracy (known costs only)."""
    known = sorted(
        (c for c in costs.values() if c.known),
        key=lambda c: (c.usd_per_m_output, -c.quality.accuracy),
    )
    best = -1.0
    on = set()
    for c in known:
        if c.quality.accuracy > best:
            on.add(c.label)
            best = c.quality.accuracy
    return on
