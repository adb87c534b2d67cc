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
    arms, floor = report.sections[0], report.sections[4]
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


def _editformat(outcome: str, parts: dict[str, bool] | None, i: int, **kw: object) -> ItemResult:
    return ItemResult(
        "m", f"e{i}", f"d{i}", "editformat", outcome, parts=parts or {}, run="r", **kw
    )  # type: ignore[arg-type]


def test_sub_scores_count_truncated_and_timed_out_items_as_failures() -> None:
    """Ten edit-format items, one answered well-formed, the rest truncated, timed out or
    errored: well_formed is 1 of 10 (not 1.000 of the one that showed it), and the report says
    beside the score how many could not show it."""
    shown = {"well_formed": True, "applies": True, "applies_lenient": True, "tests_pass": False}
    results = [_editformat("wrong", shown, 0)]
    results += [_editformat("truncated", None, i, finish_reason="length") for i in range(1, 7)]
    results += [_editformat("timeout", None, i, error_class="timeout") for i in range(7, 9)]
    results += [_editformat("error", None, 9, error_class="http_503")]
    section = next(s for s in build_report(results).sections if s.title == "Sub-scores")
    rows = {row[2]: row for row in section.rows}
    assert list(rows) == ["well_formed", "applies", "applies_lenient", "tests_pass"]
    family, arm, _, rate, k_of_n, without = rows["well_formed"]
    assert (family, arm, k_of_n) == ("editformat", "m", "1/10")
    assert rate.startswith("0.100 [")
    assert without == "error 1, timeout 2, truncated 6"
    assert rows["tests_pass"][4] == "0/10"


def test_sub_scores_of_a_family_whose_every_item_was_cut_off() -> None:
    """No item showed a sub-score: the family's declared sub-scores are still reported, 0/n."""
    results = [_editformat("truncated", None, i, finish_reason="length") for i in range(3)]
    results += [ItemResult("m", f"i{i}", f"di{i}", "ifeval", "timeout", run="r") for i in range(2)]
    section = next(s for s in build_report(results).sections if s.title == "Sub-scores")
    got = {(row[0], row[2]): (row[4], row[5]) for row in section.rows}
    assert got[("editformat", "well_formed")] == ("0/3", "truncated 3")
    assert got[("ifeval", "strict")] == ("0/2", "timeout 2")
    assert got[("ifeval", "loose")] == ("0/2", "timeout 2")


def test_errors_are_counted_apart_by_class() -> None:
    results = [
        ItemResult("m", "a", "da", "math", "error", run="r", error_class="http_503", error="x"),
        ItemResult("m", "b", "db", "math", "error", run="r", error_class="http_503", error="y"),
        ItemResult("m", "c", "dc", "math", "error", run="r", error_class="scorer", error="z"),
        ItemResult("m", "d", "dd", "math", "timeout", run="r", error_class="timeout"),
        ItemResult("m", "e", "de", "math", "correct", "stop", run="r"),
    ]
    section = next(s for s in build_report(results).sections if s.title == "Errors and timeouts")
    assert section.rows == (("m", "5", "3", "http_503 2, scorer 1", "1", "0"),)


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


def test_written_files(tmp_path: Path) -> None:
    results = run("local", "r1", 0.6, 1) + run("local", "r2", 0.6, 2) + run("api", "r3", 0.9, 3)
    paths = write_report(results, tmp_path / "out")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "<table>" in page and 'src="accuracy.png"' in page
    assert "![accuracy by family](accuracy.png)" in paths["markdown"].read_text()
