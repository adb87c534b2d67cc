"""Sub-scores over every item of a family, and errors counted apart by class."""

from __future__ import annotations

from evals.report import build_report
from evals.result import ItemResult


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
