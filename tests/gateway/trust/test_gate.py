"""The quality gate: cheapest within the noise floor, refusals, persistence, the pin."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evals.result import ItemResult
from evals.stats import NoiseFloor, PairingError, against_floor, pair, wilson
from gateway.ledger.store import Store
from gateway.serving.routing import gate_first
from gateway.trust.gate import (
    GateBook,
    GateDecision,
    SharedGateBook,
    control_pair,
    decide,
    gate_arms,
    pinned_upstream,
)


def arm(
    target: str,
    correct: list[bool],
    *,
    params: str = "h",
    run: str = "",
    outcomes: dict[int, str] | None = None,
) -> list[ItemResult]:
    out = []
    for i, ok in enumerate(correct):
        outcome = (outcomes or {}).get(i, "correct" if ok else "wrong")
        out.append(
            ItemResult(
                target=target,
                item_id=f"i{i}",
                item_digest=f"d{i}",
                family="math",
                outcome=outcome,
                params_hash=params,
                run=run or target,
            )
        )
    return out


def flips(n: int, wrong: set[int]) -> list[bool]:
    return [i not in wrong for i in range(n)]


N = 200
# Control: the same configuration twice differs on 12 items, 6 each way.
CONTROL = pair(
    arm("c1", flips(N, set(range(0, 40, 2)) | {100, 101, 102, 103, 104, 105})),
    arm("c2", flips(N, set(range(0, 40, 2)) | {110, 111, 112, 113, 114, 115})),
)
BEST = flips(N, set(range(0, 40)))  # 160 / 200


def test_cheaper_upstream_within_the_floor_wins() -> None:
    # The cheap one loses 4 items and wins 1: a gap of 1.5 points, inside the noise.
    cheap = flips(N, set(range(0, 40)) | {150, 151, 152, 153} - {0})
    cheap[0] = True
    decision = decide(
        "m",
        {"api": arm("api", BEST), "node": arm("node", cheap)},
        [CONTROL],
        {"api": 0.60, "node": 0.12},
        min_items=50,
        now=1.0,
    )
    assert decision.best == "api" and decision.chosen == "node"
    node = next(a for a in decision.arms if a.upstream == "node")
    assert node.eligible and node.only_best == 4 and node.only_this == 1
    assert node.p_value is not None and node.p_value > 0.05
    assert "within the floor" in node.why and decision.floor["gap"] == pytest.approx(0.0)


def test_cheaper_upstream_worse_beyond_the_floor_loses() -> None:
    worse = flips(N, set(range(0, 80)))  # 40 more wrong, none better
    decision = decide(
        "m",
        {"api": arm("api", BEST), "node": arm("node", worse)},
        [CONTROL],
        {"api": 0.60, "node": 0.12},
        min_items=50,
    )
    assert decision.chosen == "api"
    node = next(a for a in decision.arms if a.upstream == "node")
    assert not node.eligible and node.why.startswith("worse beyond the floor")


def test_refusals_keep_traffic_on_the_best() -> None:
    cheap = arm("node", BEST, params="greedy")
    d = decide(
        "m",
        {"api": arm("api", BEST), "node": cheap},
        [CONTROL],
        {"api": 0.6, "node": 0.1},
        min_items=50,
    )
    why = next(a.why for a in d.arms if a.upstream == "node")
    assert d.chosen == "api" and "refused, not at parity" in why
    fewer = arm("node", BEST[:150])
    d = decide("m", {"api": arm("api", BEST), "node": fewer}, [CONTROL], {"api": 0.6, "node": 0.1})
    assert d.chosen == "api" and "item sets differ" in d.arms[-1].why
    one_less = arm("node", flips(N, set(range(0, 41))))
    d = decide("m", {"api": arm("api", BEST), "node": one_less}, None, {"api": 0.6, "node": 0.1})
    assert d.chosen == "api" and "control pair" in d.arms[1].why
    d = decide(
        "m",
        {"api": arm("api", BEST), "node": one_less},
        [CONTROL],
        {"api": 0.6, "node": 0.1},
        min_items=500,
    )
    assert d.chosen == "api" and "paired items" in d.arms[1].why
    assert decide("m", {}, None, {}).chosen is None


def test_timeouts_stay_in_the_denominator_of_the_gate() -> None:
    # 20 timeouts on the cheap arm: they are not "dropped", they count as not correct.
    timeouts = {i: "timeout" for i in range(100, 120)}
    cheap = arm("node", BEST, outcomes=timeouts)
    d = decide(
        "m",
        {"api": arm("api", BEST), "node": cheap},
        [CONTROL],
        {"api": 0.6, "node": 0.1},
        min_items=50,
    )
    node = next(a for a in d.arms if a.upstream == "node")
    assert node.n == N and node.correct == 140 and not node.eligible and d.chosen == "api"


def test_unpriced_upstreams_never_win_on_price() -> None:
    d = decide(
        "m",
        {"api": arm("api", BEST), "node": arm("node", BEST)},
        [CONTROL],
        {"api": 0.6, "node": None},
        min_items=50,
    )
    assert d.chosen == "api"


def test_book_persists_latest_and_history(tmp_path: Path) -> None:
    book = GateBook(tmp_path / "gate" / "decisions.json", history=2)
    for t in (1.0, 2.0, 3.0):
        book.record(decide("m", {"api": arm("api", BEST)}, None, {"api": 0.6}, now=t))
    latest = book.latest("m")
    assert latest is not None and latest.decided_at == 3.0 and latest.chosen == "api"
    assert latest.arms[0].ci == pytest.approx(wilson(160, 200))
    assert len(book._read()["history"]) == 2 and book.latest("other") is None
    assert set(book.view()) == {"m"}


def test_gateways_on_one_store_route_by_the_same_decision(store: Store) -> None:
    """A decision one gateway records is the one every other gateway on the store routes by,
    once it reloads (the app does every minute); a restarted gateway starts from it."""
    here, there = SharedGateBook(store, history=2), SharedGateBook(store, history=2)
    for t in (1.0, 2.0, 3.0):
        here.record(decide("m", {"api": arm("api", BEST)}, None, {"api": 0.6}, now=t))
    assert there.latest("m") is None  # not reloaded yet
    there.refresh()
    latest = there.latest("m")
    assert latest is not None and latest.decided_at == 3.0 and latest.chosen == "api"
    assert latest.arms[0].ci == pytest.approx(wilson(160, 200))
    assert [d["decided_at"] for d in there._read()["history"]] == [2.0, 3.0]
    assert json.dumps(there.view()) == json.dumps(here.view())
    assert gate_first(["x", "api"], latest.chosen) == ["api", "x"]


def test_order_pin_and_arms() -> None:
    d = decide(
        "m",
        {"api": arm("api", BEST), "node": arm("node", BEST)},
        [CONTROL],
        {"api": 0.6, "node": 0.1},
        min_items=50,
    )
    assert gate_first(["api", "node", "x"], d.chosen) == ["node", "api", "x"]
    assert gate_first(["api"], None) == ["api"]
    assert pinned_upstream({"x-plumbline-upstream": "node"}, "eval", ["api", "node"]) == "node"
    assert pinned_upstream({"x-plumbline-upstream": "node"}, "client", ["api", "node"]) is None
    assert pinned_upstream({"x-plumbline-upstream": "evil"}, "eval", ["api", "node"]) is None
    assert gate_arms("m", ["api", "node"], "api") == [
        ("m@api", "api"),
        ("m@node", "node"),
        ("m@api#control", "api"),
    ]


def test_a_gap_inside_the_floor_is_not_presented_as_real() -> None:
    # 8 to 2 discordant on 200 items: McNemar p ~ 0.11 — and the control saw 6 to 6.
    a = flips(N, set(range(0, 40)))
    b = flips(N, set(range(0, 40)) | set(range(150, 158)) - {0, 1})
    b[0] = b[1] = True
    p = pair(arm("api", a), arm("node", b))
    verdict = against_floor(p, NoiseFloor.from_controls([CONTROL]))
    assert not verdict.exceeds and "McNemar" in verdict.reason


def test_a_control_that_changed_engine_mid_run_is_refused() -> None:
    """The control upstream's two runs are only noise when one serving stack answered both."""
    first = arm("dear", flips(N, {1, 2}))
    second = [replace(r, engine="vllm 0.32.0 template bbbbbbbbbbbb") for r in first]
    first = [replace(r, engine="vllm 0.31.0 template aaaaaaaaaaaa") for r in first]
    with pytest.raises(PairingError, match="different engines"):
        control_pair("dear", first, second)
    same = control_pair("dear", first, first)
    assert same.n == N and same.discordant == 0 and same.a == "dear run 1"


def test_each_shape_is_decided_on_its_own_family_among_its_own_upstreams(store: Store) -> None:
    """`decide_shapes`: tools on the tools items, reasoning on the math items; a shape whose
    family has no items decides nothing, one without a family (structured) is not decided; the
    book keeps each under route#shape, and routing prefers it to the route's own decision."""
    from gateway.trust.gate import decide_shapes

    def family(results: list[ItemResult], name: str) -> list[ItemResult]:
        return [replace(r, family=name, item_id=f"{name}{r.item_id}") for r in results]

    def both(target: str, tools: list[bool], maths: list[bool]) -> list[ItemResult]:
        return family(arm(target, tools), "tools") + family(arm(target, maths), "math")

    worse = flips(N, set(range(0, 100)))  # 100 / 200: far beyond the floor
    results = {
        "node": both("node", BEST, BEST),
        "api": both("api", BEST, worse),  # as good on tools, worse on maths
        "other": both("other", BEST, BEST),  # routed to by no shape below
    }
    control = ("node", both("c1", BEST, BEST), both("c2", BEST, BEST))
    prices = {"node": 1.0, "api": 0.1, "other": 0.01}
    shapes = {
        "tools": ["node", "api"],
        "reasoning": ["node", "api"],
        "edit": ["node", "api"],
        "structured": ["node", "api"],
    }
    decided = {d.shape: d for d in decide_shapes("m", shapes, results, control, prices)}
    assert set(decided) == {"tools", "reasoning", "edit"}
    assert decided["tools"].chosen == "api"  # cheapest; "other" is not the shape's
    assert decided["reasoning"].chosen == "node"
    assert decided["edit"].chosen is None and decided["edit"].reason == "no eval results"
    assert {a.n for a in decided["tools"].arms} == {N}  # the tools items alone
    book = SharedGateBook(store)
    book.record(decide("m", {"node": arm("node", BEST)}, None, {"node": 1.0}))
    for d in decided.values():
        book.record(d)
    assert set(book.view()) == {"m", "m#tools", "m#reasoning", "m#edit"}
    latest = {s: book.latest_for("m", s) for s in ("tools", "reasoning", "edit", "default")}
    assert {s: d.chosen for s, d in latest.items() if d is not None} == {
        "tools": "api",
        "reasoning": "node",
        "edit": "node",  # nothing measured for edit: the route's decision
        "default": "node",
    }
    book.refresh()  # read back from the rows, as another gateway would
    tools = book.latest("m", "tools")
    assert tools is not None and tools.shape == "tools" and tools.key == "m#tools"


def test_a_round_too_small_to_tell_the_gap_apart_cannot_move_traffic() -> None:
    # The cheap arm looks within the floor on 40 items, but 40 items cannot tell a 5-point gap
    # apart: no proof of parity, the best keeps the traffic, and both say why.
    n = 40
    small_control = pair(
        arm("c1", flips(n, set(range(0, 8, 2)) | {30})), arm("c2", flips(n, set(range(0, 8, 2))))
    )
    best, cheap = flips(n, set(range(0, 8))), flips(n, set(range(0, 8)) | {30})
    prices = {"api": 10.0, "node": 1.0}
    results = {"api": arm("api", best), "node": arm("node", cheap)}
    d = decide("m", results, [small_control], prices, min_items=30)
    assert d.chosen == "api"
    node = next(a for a in d.arms if a.upstream == "node")
    assert node.why.startswith("cannot decide: this round can tell apart")
    assert node.why.endswith("the gate asks for a 5-point gap") and node.mde is not None
    assert d.paired_n == n and d.mde is not None and d.mde > 0.05
    assert d.resolution.startswith(f"this round can tell apart a {round(100 * d.mde)}-point")
    assert "a 5-point gap needs" in d.resolution and f"this round had {n}" in d.resolution
    # A coarser gate (what the round can resolve) lets the same evidence move traffic.
    coarse = decide("m", results, [small_control], prices, min_items=30, detect_gap=0.5)
    assert coarse.chosen == "node"


def test_every_decision_carries_its_resolution() -> None:
    cheap = flips(N, set(range(0, 40)) | {150, 151, 152, 153} - {0})
    d = decide("m", {"api": arm("api", BEST), "node": arm("node", cheap)}, [CONTROL], {})
    again = GateDecision.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again.resolution == d.resolution and again.arms[1].mde == d.arms[1].mde
    # The control's 12 of 200 discordant set the round's discordance (6%, over the arm's 2.5%).
    assert d.discordance == pytest.approx(0.06) and d.paired_n == N
    assert "200 paired items, 6% discordant; α 0.05, power 0.8" in d.resolution


# ---- parity: refusals name field, value and upstream; accepted differences are shown ----------

UNSENT = "api-b cannot be sent top_k=20 (kind openai)"


def told(results: list[ItemResult], **fields: str) -> list[ItemResult]:
    """`results` as the runner keeps them from the gateway's parity headers."""
    return [replace(r, **fields) for r in results]


def test_an_arm_not_at_parity_is_refused_naming_field_value_and_upstream() -> None:
    asked = "temperature=0.7, top_p=0.8, top_k=20"
    node = told(arm("node", BEST, params="h-node"), semantics=asked)
    control = pair(node, told(arm("node-2", BEST, params="h-node"), semantics=asked))
    api = told(arm("api-b", BEST, params="h-api"), semantics=asked, unsent=UNSENT)
    d = decide("m", {"node": node, "api-b": api}, [control], {"node": 0.6, "api-b": 0.1})
    refused = next(a for a in d.arms if a.upstream == "api-b")
    assert refused.why == f"refused, not at parity with node: {UNSENT}"
    assert "params_hash" not in refused.why and d.chosen == "node"
    # Both told everything, asked otherwise: the differing field is named on both sides.
    other = told(arm("api-b", BEST, params="h-off"), semantics=asked + ", enable_thinking=true")
    d = decide("m", {"node": node, "api-b": other}, [control], {"node": 0.6, "api-b": 0.1})
    why = next(a.why for a in d.arms if a.upstream == "api-b")
    assert why == (
        "refused, not at parity with node: api-b was asked otherwise than node: "
        "enable_thinking=true against enable_thinking=unset"
    )


def test_an_accepted_difference_is_shown_beside_the_decision() -> None:
    node = arm("node", BEST, params="h")
    control = pair(node, arm("node-2", BEST, params="h"))
    api = told(arm("api-b", BEST, params="h"), accepted=UNSENT)
    d = decide(
        "m", {"node": node, "api-b": api}, [control], {"node": 0.6, "api-b": 0.1}, min_items=50
    )
    chosen = next(a for a in d.arms if a.upstream == "api-b")
    assert d.chosen == "api-b" and chosen.accepted == f"accepted unequal: {UNSENT}"
    assert d.reason.endswith(f"(accepted unequal: {UNSENT})")
    assert next(a for a in d.arms if a.upstream == "node").accepted == ""
    assert GateDecision.from_dict(d.to_dict()) == d
