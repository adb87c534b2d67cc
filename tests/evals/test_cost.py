"""Pricing eval arms: the gateway's per-request cost, and node-hours for self-hosted arms."""

from __future__ import annotations

import pytest

from evals.cost import arm_costs, frontier, price_nodes
from evals.result import ItemResult
from gateway.config import Node


def item(i: int, upstream: str, started: float, latency: float, out: int, **kw: object):
    return ItemResult(
        "local", f"i{i}", f"d{i}", "math", "correct", "stop", out, run="r", upstream=upstream,
        started=started, latency_s=latency, prompt_tokens=0, **kw,
    )  # type: ignore[arg-type]  # fmt: skip


def test_node_items_share_the_busy_hours_of_their_node_by_tokens() -> None:
    """Two overlapping requests and one later: the node was busy 0.5 h + 0.25 h (the union, not
    the sum), at $8 per active hour with utilisation 0.5 that is 0.75 h * $16 = $12, split 1:1:2
    by tokens. An API item keeps its price; an item of an upstream on no node stays unpriced."""
    results = [
        item(0, "gpu-a", 0.0, 1800.0, 100),
        item(1, "gpu-a", 900.0, 900.0, 100),  # inside the first
        item(2, "gpu-b", 7200.0, 900.0, 200),  # the same node, another upstream
        item(3, "api", 0.0, 10.0, 100, cost=0.5, cost_basis="price"),
        item(4, "elsewhere", 0.0, 10.0, 100),
    ]
    priced = price_nodes(
        results, {"gpu-a": "box", "gpu-b": "box"}, {"box": Node(cost_per_hour=8.0, utilisation=0.5)}
    )
    assert [r.cost for r in priced[:3]] == pytest.approx([3.0, 3.0, 6.0])
    assert {r.cost_basis for r in priced[:3]} == {"node-hours"}
    assert priced[3] == results[3]
    assert priced[4].cost is None
    cost = arm_costs({"local": priced})["local"]
    assert cost.priced == 4 and cost.usd == pytest.approx(12.5)
    assert cost.bases == ("node-hours", "price")


def test_no_cost_is_unknown_not_zero() -> None:
    [c] = arm_costs({"a": [item(0, "x", 0.0, 1.0, 10)]}).values()
    assert not c.known and c.usd_per_m_output is None


def test_frontier_keeps_arms_no_cheaper_arm_beats() -> None:
    def arm(cost: float, right: int) -> list[ItemResult]:
        return [
            ItemResult(
                "t",
                f"i{i}",
                f"d{i}",
                "math",
                "correct" if i < right else "wrong",
                output_tokens=1000,
                cost=cost,
            )  # fmt: skip
            for i in range(10)
        ]

    costs = arm_costs({"a": arm(0.001, 5), "b": arm(0.002, 8), "c": arm(0.003, 7)})
    assert frontier(costs) == {"a", "b"}
