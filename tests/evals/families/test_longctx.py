import re

import pytest

from evals.families import longctx as family
from evals.item import Item, Reply, items_digest


def words(text: str) -> int:
    """A real (if crude) tokenizer: one token per word or punctuation mark."""
    return len(re.findall(r"\w+|[^\w\s]", text))


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return family.build(0)


def test_default_suite(items: list[Item]) -> None:
    assert len(items) == family.DEFAULT_N
    assert {i.meta["kind"] for i in items} == set(family.KINDS)
    assert {i.meta["fill"] for i in items} == set(family.FILLS)
    assert items_digest(items) == items_digest(family.build(0))
    assert items_digest(items) != items_digest(family.build(0, window=16384))


@pytest.mark.parametrize("window", [4096, 32768])
def test_prompts_fill_the_window_as_counted_by_the_given_tokenizer(window: int) -> None:
    built = family.build(1, 12, window=window, reserve=1024, count_tokens=words)
    for item in built:
        target = item.meta["fill"] * (window - 1024)
        tokens = words(item.messages[0]["content"])
        assert tokens == item.meta["prompt_tokens"]
        assert 0.95 * target <= tokens <= target, (item.id, tokens, target)


def test_a_window_too_small_is_refused() -> None:
    with pytest.raises(ValueError):
        family.build(0, 3, window=600, reserve=512)


def test_needles_sit_once_at_their_depth_among_near_miss_distractors(items: list[Item]) -> None:
    for item in items:
        lines = item.messages[0]["content"].split("<log>\n")[1].split("\n</log>")[0].splitlines()
        for code in item.answer:
            hits = [n for n, line in enumerate(lines) if code in line]
            assert len(hits) == 1, item.id
        notes = [line for line in lines if line.startswith("NOTE")]
        assert len(notes) >= len(item.answer) + 2  # distractors present
        if item.meta["kind"] == "needle":
            position = next(n for n, line in enumerate(lines) if item.answer[0] in line)
            assert abs(position / len(lines) - item.meta["depths"][0]) < 0.05


def test_multihop_answer_is_reachable_only_through_the_forwarding_note(items: list[Item]) -> None:
    item = next(i for i in items if i.meta["kind"] == "multihop")
    text = item.messages[0]["content"]
    asked = re.search(r"Vault (\S+) forwards", text)[1]
    target = re.search(rf"vault {re.escape(asked)} forwards to vault (\S+)\.", text)[1]
    code = re.search(rf"access code for vault {re.escape(target)} is (\w+)\.", text)[1]
    assert [code] == item.answer


def _answer(item: Item, value: str) -> str:
    return family.score_exact(item, Reply(f"Found it.\nANSWER: {value}")).outcome


def test_scoring_near_misses(items: list[Item]) -> None:
    needle = next(i for i in items if i.meta["kind"] == "needle")
    code = needle.answer[0]
    assert _answer(needle, code) == "correct"
    assert _answer(needle, code.upper()) == "correct"
    assert _answer(needle, code[:-1]) == "wrong"
    assert _answer(needle, f"{code} or 1234abcd") == "wrong"
    assert family.score_exact(needle, Reply(f"<think>ANSWER: {code}")).outcome == "unparsed"
    assert family.score_exact(needle, Reply(f"the code is {code}")).outcome == "unparsed"


def test_multikey_needs_the_exact_set(items: list[Item]) -> None:
    multi = next(i for i in items if i.meta["kind"] == "multikey")
    a, b, c = multi.answer
    assert _answer(multi, f"{c}, {a}, {b}") == "correct"
    assert _answer(multi, f"{a}, {b}") == "wrong"
    assert _answer(multi, f"{a}, {b}, {c}, {c}") == "wrong"
    assert _answer(multi, f"{a}, {b}, deadbeef") == "wrong"
