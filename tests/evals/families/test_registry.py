import pytest

import evals.families as registry
from evals.item import Item, Reply

MINE = {
    "math": "math_integer",
    "code": "code_tests",
    "tools": "bfcl_ast",
    "longctx": "longctx_exact",
}


def test_registry_lists_builders_and_scorers() -> None:
    for family, scorer in MINE.items():
        assert family in registry.FAMILIES
        assert scorer in registry.SCORERS


def test_build_and_score_by_name() -> None:
    [item] = registry.build("math", 0, 1)
    assert item.family == "math"
    assert registry.score(item, Reply(f"ANSWER: {item.answer}")).correct
    assert registry.score(item, Reply(f"ANSWER: {item.answer + 1}")).outcome == "wrong"


def test_a_reply_cut_at_the_length_limit_is_truncated_whatever_it_says() -> None:
    [item] = registry.build("math", 0, 1)
    reply = Reply(f"ANSWER: {item.answer}", finish_reason="length")
    assert registry.score(item, reply).outcome == "truncated"


def test_an_unknown_scorer_is_an_error() -> None:
    item = Item("x", "math", (), 1, "no_such_scorer")
    with pytest.raises(KeyError):
        registry.score(item, Reply("ANSWER: 1"))


@pytest.mark.parametrize("family", ["math", "code", "tools", "knowledge", "ifeval", "editformat"])
def test_every_sub_score_a_family_shows_is_declared(family: str) -> None:
    """The report counts every item in a sub-score's denominator by the family's declared
    PARTS (an item that could not show one fails it), so a scorer must never show an
    undeclared one."""
    [item] = registry.build(family, 0, 1)
    verdict = registry.score(item, Reply("hello world"))
    assert set(verdict.parts) <= set(registry.parts_of(family))
    assert registry.parts_of(family) == {
        "ifeval": ("strict", "loose"),
        "tools": ("tools_strict",),
        "editformat": ("well_formed", "applies", "applies_lenient", "tests_pass"),
    }.get(family, ())
    if registry.parts_of(family) and verdict.outcome == "malformed":
        assert set(verdict.parts) == set(registry.parts_of(family))
