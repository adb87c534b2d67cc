import random
from dataclasses import replace
from pathlib import Path

import pytest

from evals.report import (
    arms_from_results,
    build_report,
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
        "Errors and timeouts",
        "Noise floor (same configuration twice)",
        "Paired against local@r1",
        "Quality against cost",
    ]
    family = report.sections[1]
    overall = next(r for r in family.rows if r[0] == "overall" and r[1] == "local@r1")
    assert overall[2] == "80"
    assert overall[4] == "10.0%"  # truncated
    assert "[" in overall[3]  # interval
    paired = report.sections[5]
    [api_row] = paired.rows
    assert api_row[0] == "local@r1 vs api"
    assert api_row[-1].startswith("exceeds")
    assert any("other" in n and "refused" in n and "not at parity" in n for n in paired.notes)
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
    arms, floor = report.sections[0], report.sections[4]
    assert [row[6] for row in arms.rows] == [old, new, f"{old}, {new}"]
    assert [row[7] for row in arms.rows] == ["at parity"] * 3
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
    assert len(same.sections[4].rows) == 1


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
    costs = build_report(with_cost).costs
    tokens = sum(100 + i for i in range(80))
    assert costs["api"].usd_per_m_output == pytest.approx(1e6 * 0.002 * 80 / tokens)
    assert not costs["local"].known and costs["local"].usd_per_m_output is None


def test_the_frontier_is_in_the_report_and_an_unknown_cost_is_never_zero(tmp_path: Path) -> None:
    """The frontier chart is embedded in the HTML and its points tabled in the Markdown; an arm
    with no cost record says "unknown", is off the chart, and a note says so."""
    results = (
        run("cheap", "r1", 0.6, 1, cost=0.0001)
        + run("dear", "r2", 0.95, 2, cost=0.01)
        + run("worse", "r3", 0.5, 3, cost=0.02)
        + run("local", "r4", 0.7, 4)
    )
    paths = write_report(results, tmp_path / "out")
    page, md = paths["html"].read_text(), paths["markdown"].read_text()
    assert 'src="frontier.png"' in page
    assert "![quality against cost](frontier.png)" in md
    table = md.split("## Quality against cost")[1]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if "|" in line}
    assert rows["cheap"].endswith("| yes |") and rows["dear"].endswith("| yes |")
    assert rows["worse"].endswith("| no |")  # dearer and worse than `dear`
    assert "| unknown | unknown | 0/80 |" in rows["local"]
    assert "cost unknown for local: left off the frontier chart" in md
    assert "cost unknown for local" in page
    assert "0.000" not in rows["local"]


def test_scorer_detail_and_errors_are_shown_per_failed_item(tmp_path: Path) -> None:
    results = [
        ItemResult("m", "ok", "d1", "ifeval", "correct", "stop", run="r"),
        ItemResult("m", "bad", "d2", "ifeval", "wrong", "stop", run="r", detail="failed: no_comma"),
        ItemResult(
            "m",
            "gone",
            "d3",
            "math",
            "error",
            run="r",
            error_class="http_503",
            error="HTTP 503: upstream down",
        ),  # fmt: skip
    ]
    paths = write_report(results, tmp_path / "out")
    details, page = paths["details"].read_text(), paths["html"].read_text()
    assert "| m | bad | ifeval | wrong | stop |  | failed: no_comma |" in details
    assert "| m | gone | math | error |  | http_503 | HTTP 503: upstream down |" in details
    assert "| m | ok |" not in details
    assert "failed: no_comma" in page and "HTTP 503: upstream down" in page
    assert "[details.md](details.md)" in paths["markdown"].read_text()


def test_charts_place_their_legends_without_searching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """loc="best" searches for a free spot and warns when that takes over a second, which a
    loaded machine turns into a failed report: both charts put their legends in fixed places."""
    from matplotlib.legend import Legend

    def searched(*_: object, **__: object) -> None:
        raise AssertionError("a chart's legend searched for the best place")

    monkeypatch.setattr(Legend, "_find_best_position", searched)
    results = run("cheap", "r1", 0.6, 1, cost=0.0001) + run("dear", "r2", 0.95, 2, cost=0.01)
    paths = write_report(results, tmp_path / "out")
    assert paths["chart"].stat().st_size > 0 and paths["frontier"].stat().st_size > 0


def test_written_files(tmp_path: Path) -> None:
    results = run("local", "r1", 0.6, 1) + run("local", "r2", 0.6, 2) + run("api", "r3", 0.9, 3)
    paths = write_report(results, tmp_path / "out")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "<table>" in page and 'src="accuracy.png"' in page
    assert "![accuracy by family](accuracy.png)" in paths["markdown"].read_text()


def test_the_report_says_whose_verdict_a_familys_accuracy_is() -> None:
    results = [
        ItemResult("local", f"{family}-{i}", f"d-{family}-{i}", family, "correct", "stop", run="r")
        for family in ("tools", "ifeval", "math")
        for i in range(3)
    ]
    notes = build_report(results).sections[1].notes
    assert any(n.startswith("tools: accuracy is bfcl_eval's own AST checker") for n in notes)
    assert any(n.startswith("ifeval: accuracy is IFEval's prompt-level strict") for n in notes)
    assert not any(n.startswith("math:") for n in notes)
    md = build_report(results).markdown("accuracy.png")
    assert "tools_strict is the suite's stricter reading, never the headline" in md


UNSENT = "api cannot be sent top_k=20 (kind openai)"


def test_an_arm_not_at_parity_is_named_field_by_field() -> None:
    local = run("local", "r1", 0.7, 1, params="h-node")
    api = [replace(r, unsent=UNSENT) for r in run("api", "r2", 0.7, 2, params="h-api")]
    report = build_report(local + api)
    arms = report.sections[0]
    assert [row[-1] for row in arms.rows] == ["at parity", f"not at parity: {UNSENT}"]
    paired = next(s for s in report.sections if s.title.startswith("Paired"))
    assert paired.rows == ()
    assert paired.notes == (
        f"local vs api refused: refusing to pair 'local' and 'api', not at parity: {UNSENT}",
    )
    assert "params_hash" not in report.markdown()


def test_an_accepted_difference_is_shown_beside_the_numbers_it_affects() -> None:
    local = run("local", "r1", 0.7, 1)
    api = [replace(r, accepted=UNSENT) for r in run("api", "r2", 0.7, 2)]
    report = build_report(local + api)
    said = f"accepted unequal: {UNSENT}"
    assert report.sections[0].rows[1][-1] == said
    family = report.sections[1]
    assert f"api: {said}" in family.notes
    paired = next(s for s in report.sections if s.title.startswith("Paired"))
    (row,) = paired.rows
    assert row[-1].endswith(f"({said})")
    cost = next(s for s in report.sections if s.title == "Quality against cost")
    assert f"api: {said}" in cost.notes
