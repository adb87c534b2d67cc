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
