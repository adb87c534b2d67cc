"""Rounds sized to decide (`gateway/trust/sizing.py`) and the scheduler's use of it: how many
items a gated route's round asks, and the item seed that changes every round."""

from __future__ import annotations

import time
from pathlib import Path

from evals.power import items_needed
from evals.result import ItemResult
from evals.suite import SUITES
from gateway.config.trust import GateConfig
from gateway.trust.gate import GateBook, GateDecision
from gateway.trust.schedule import EvalScheduler
from gateway.trust.sizing import family_sizes, planned_items, round_seed, targets_resolution
from tests.harness import config_from

DAY = 86400.0


def test_planned_items_come_from_the_gap_and_the_discordance() -> None:
    cfg = GateConfig()
    assert planned_items(cfg, None) == items_needed(0.15, 0.05) == 498
    assert planned_items(cfg, 0.05) == items_needed(0.05, 0.05) < 498
    # A round that saw no discordance still plans for the gap it must tell apart.
    assert planned_items(cfg, 0.0) == items_needed(0.05, 0.05)
    assert planned_items(GateConfig(round_items=18), 0.3) == 18
    assert planned_items(GateConfig(max_round_items=300), None) == 300
    assert planned_items(GateConfig(detect_gap=0.1), None) < 200


def test_family_sizes_grow_the_suite_evenly_and_each_shape_to_its_own() -> None:
    smoke = dict(SUITES["smoke"])
    sizes = family_sizes(smoke, 498, {"math": 600})
    assert set(sizes) == set(smoke)
    assert sum(sizes.values()) >= 498 and sizes["math"] == 600
    assert sizes["code"] == -(-498 // len(smoke))
    # A round already big enough is not shrunk; None is the family's full size.
    assert family_sizes({"math": None}, 10, {}) == {"math": 100}


def test_the_seed_changes_every_round_and_not_within_one() -> None:
    now = 1_780_000_000.0
    start = now - now % DAY
    assert round_seed(0, start, 24) == round_seed(0, start + DAY - 1, 24)
    seeds = {round_seed(0, start + k * DAY, 24) for k in range(30)}
    assert len(seeds) == 30
    assert round_seed(0, start, 24) != round_seed(1, start, 24)
    assert round_seed(0, start, 6) != round_seed(0, start + 6 * 3600, 6)


def _scheduler(tmp_path: Path, gate: dict[str, object], evals: dict[str, object]) -> EvalScheduler:
    cfg = config_from(
        {
            "upstreams": [
                {"name": "dear", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
                {
                    "name": "cheap",
                    "kind": "vllm",
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "m",
                },
            ],
            "models": {
                "smol": {
                    "upstreams": ["dear", "cheap"],
                    "policy": "cheapest_within_floor",
                    "gate": gate,
                    "shapes": {"reasoning": ["cheap"]},
                }
            },
            "evals": {"every_hours": 24, "suite": "smoke", **evals},
        }
    )
    return EvalScheduler(cfg, None, GateBook(tmp_path / "gate.json"), "http://127.0.0.1:9/v1")


def _decided(model: str, discordance: float, shape: str | None = None) -> GateDecision:
    return GateDecision(model, "dear", "r", "dear", {}, (), shape=shape, discordance=discordance)


def test_a_gated_round_is_sized_from_the_last_decision(tmp_path: Path) -> None:
    sched = _scheduler(tmp_path, {}, {})
    first = sched.round_sizes("smol")
    # Nothing observed yet: planned at 15% discordance, 498 paired items for the route's
    # decision (spread over the suite's families), and as many of each shape's own family
    # (reasoning -> math, tools, long_context -> longctx, edit -> editformat).
    assert sum(first.values()) >= 498 and first["code"] == -(-498 // 7)
    assert all(first[f] == 498 for f in ("math", "tools", "longctx", "editformat"))
    sched.gate_book.record(_decided("smol", 0.04))
    sched.gate_book.record(_decided("smol", 0.3, shape="reasoning"))
    later = sched.round_sizes("smol")
    # The route's comparisons were 4% discordant: 157 paired items will do; the reasoning
    # shape's were 30% discordant and need more than planned.
    assert later["code"] == -(-items_needed(0.05, 0.05) // 7) < first["code"]
    assert later["math"] == items_needed(0.3, 0.05) > first["math"]


def test_the_embedded_default_stays_small(tmp_path: Path) -> None:
    sched = _scheduler(tmp_path, {"round_items": 3}, {})
    sizes = sched.round_sizes("smol")
    assert sizes == {**SUITES["smoke"], "math": 3, "tools": 3, "longctx": 3, "editformat": 3}


def test_every_arm_of_a_round_gets_one_seed_and_the_next_round_another(tmp_path: Path) -> None:
    sched = _scheduler(tmp_path, {}, {"seed": 7})
    now = time.time()
    spec = sched._spec(["smol@dear", "smol@cheap", "smol@dear#control"], now)
    assert spec.seed == round_seed(7, now, 24)  # one spec, one item set for every arm
    assert sched._spec(["x"], now + DAY).seed != spec.seed
    fixed = _scheduler(tmp_path, {}, {"seed": 7, "rotate_seed": False})
    assert fixed._spec(["x"], now).seed == fixed._spec(["x"], now + DAY).seed == 7


def test_a_small_plain_round_says_what_it_cannot_tell_apart() -> None:
    def run(target: str, right: set[int]) -> list[ItemResult]:
        return [
            ItemResult(target, f"i{i}", f"d{i}", "math", "correct" if i in right else "wrong")
            for i in range(18)
        ]

    said = targets_resolution(run("a", {1, 2, 3}) + run("b", {1, 2}))
    basis = "18 paired items, 5.56% discordant; α 0.05, power 0.8"
    assert said == f"this round can tell apart a 40-point gap ({basis})"
    alone = targets_resolution(run("a", set()))
    assert alone.startswith("this round can tell apart a 40-point")
