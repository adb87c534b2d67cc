import random
from dataclasses import replace
from pathlib import Path

import pytest

from evals.report import (
    arms_from_results,
    build_report,
    cost_points,
    default_controls,
    write_report,
)
from evals.result import ItemResult

FAMILIES = ("math", "knowledge", "ifeval", "editformat")


def run(
    target: str,
    run_id: str,
    accuracy: float,
    seed: int,
    params: str = "h1",
    cost: float | None = None,
    truncate: int = 0,
    engine: str = "",
) -> list[ItemResult]:
    rng = random.Random(seed)
    out = []
    for i in range(80):
        family = FAMILIES[i % 4]
        if i < truncate:
            outcome, finish = "truncated", "length"
        else:
            outcome, finish = ("correct" if rng.random() < accuracy else "wrong"), "stop"
        parts = {"strict": outcome == "correct", "loose": True} if family == "ifeval" else {}
        out.append(
            ItemResult(
                target,
                f"{family}-{i}",
                f"digest-{i}",
                family,
                outcome,
                finish,
                output_tokens=100 + i,
                params_hash=params,
                run=run_id,
                cost=cost,
                parts=parts,
                engine=engine,
            )
        )
    return out


def test_arms_and_controls() -> None:
    results = run("local", "r1", 0.7, 1) + run("local", "r2", 0.7, 2) + run("api", "r3", 0.7, 3)
    arms = arms_from_results(results)
    assert list(arms) == ["local@r1", "local@r2", "api"]
    assert default_controls(arms) == [("local@r1", "local@r2")]


def test_report_sections() -> None:
    results = (
        run("local", "r1", 0.6, 1, truncate=8)
        + run("local", "r2", 0.6, 2)
        + run("api", "r3", 0.95, 3, cost=0.001)
        + run("other", "r4", 0.6, 4, params="h2")
    )
    report = build_report(results)
    md = report.markdown("accuracy.png")
    titles = [s.title for s in report.sections]
    assert titles == [
        "Arms",
        "Accuracy by family",
        "Sub-scores",
        "Noise floor (same configuration twice)",
        "Paired against local@r1",
        "Quality against cost",
    ]
    family = report.sections[1]
    overall = next(r for r in family.rows if r[0] == "overall" and r[1] == "local@r1")
    assert overall[2] == "80"
    assert overall[4] == "10.0%"  # truncated
    assert "[" in overall[3]  # interval
    paired = report.sections[4]
    [api_row] = paired.rows
    assert api_row[0] == "local@r1 vs api"
    assert api_row[-1].startswith("exceeds")
    assert any(
        "other" in n and "refused" in n and "sampling parameters differ" in n for n in paired.notes
    )
    assert "noise floor: aggregate gap" in md
    assert "| overall | api | 80 |" in md


def test_a_control_across_an_engine_change_is_refused() -> None:
    """The same target run twice is no noise floor when vLLM or its chat template changed in
    between: the report refuses it as a control and says why; an arm served by two engines is
    named."""
    old, new = "vllm 0.31.0 template aaaaaaaaaaaa", "vllm 0.32.0 template bbbbbbbbbbbb"
    mixed = run("local", "r3", 0.6, 3, engine=old)
    for i in range(40):
        mixed[i] = replace(mixed[i], engine=new)
    report = build_report(
        run("local", "r1", 0.6, 1, engine=old) + run("local", "r2", 0.6, 2, engine=new) + mixed
    )
    arms, floor = report.sections[0], report.sections[3]
    assert [row[-1] for row in arms.rows] == [old, new, f"{old}, {new}"]
    assert arms.notes == (
        f"local@r3 was served by 2 engines ({old}, {new}): its items do not come from one "
        "serving stack",
    )
    refused = [n for n in floor.notes if "refused" in n]
    assert len(refused) == 3 and all("different engines" in n for n in refused)
    assert floor.rows == ()
    assert "noise floor is unknown" in report.markdown()
    # The same engine on both runs (or none known): an ordinary control.
    same = build_report(
        run("local", "r1", 0.6, 1, engine=old) + run("local", "r2", 0.6, 2, engine=old)
    )
    assert len(same.sections[3].rows) == 1


def test_report_without_a_control_says_the_floor_is_unknown() -> None:
    report = build_report(run("local", "r1", 0.6, 1) + run("api", "r2", 0.6, 2))
    md = report.markdown()
    assert "noise floor is unknown" in md
    assert "floor unknown" in md


def test_frontier_chart_only_with_costs(tmp_path: Path) -> None:
    no_cost = write_report(run("local", "r1", 0.6, 1), tmp_path / "a")
    assert "frontier" not in no_cost
    with_cost = run("local", "r1", 0.6, 1) + run("api", "r2", 0.9, 2, cost=0.002)
    paths = write_report(with_cost, tmp_path / "b")
    assert paths["frontier"].read_bytes()[:4] == b"\x89PNG"
    [(label, (per_m, _acc))] = cost_points(build_report(with_cost)).items()
    tokens = sum(100 + i for i in range(80))
    assert label == "api" and per_m == pytest.approx(1e6 * 0.002 * 80 / tokens)


def test_written_files(tmp_path: Path) -> None:
    results = run("local", "r1", 0.6, 1) + run("local", "r2", 0.6, 2) + run("api", "r3", 0.9, 3)
    paths = write_report(results, tmp_path / "out")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "<table>" in page and 'src="accuracy.png"' in page
    assert "![accuracy by family](accuracy.png)" in paths["markdown"].read_text()
