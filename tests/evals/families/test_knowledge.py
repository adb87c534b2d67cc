import pytest

from evals.families import knowledge
from evals.item import Item, Reply

ITEMS = knowledge.build(0)
MCQ = [i for i in ITEMS if i.scorer == "knowledge_mcq"]
SHORT = [i for i in ITEMS if i.scorer == "knowledge_short"]


def mcq(letter: str = "D", options: list[str] | None = None) -> Item:
    options = options or [f"opt{i}" for i in range(10)]
    return Item("k", "knowledge", (), {"letter": letter, "options": options}, "knowledge_mcq")


def short(*aliases: str) -> Item:
    return Item("k", "knowledge", (), {"aliases": list(aliases)}, "knowledge_short")


def test_builder() -> None:
    assert len(ITEMS) == 60 and len(MCQ) == 30 and len(SHORT) == 30
    assert len({i.id for i in ITEMS}) == 60
    assert [i.digest() for i in knowledge.build(0)] == [i.digest() for i in ITEMS]
    assert [i.digest() for i in knowledge.build(1)] != [i.digest() for i in ITEMS]
    assert len({i.meta["table"] for i in ITEMS}) == len(knowledge.TABLES)


def test_mcq_items_have_ten_same_attribute_options_with_the_gold_once() -> None:
    for item in MCQ:
        options = item.answer["options"]
        assert len(options) == 10 == len(set(options))
        table = next(t for t in knowledge.TABLES if t.name == item.meta["table"])
        values = {v for _, v, _ in knowledge._rows(table)}
        assert set(options) <= values
        gold = options[knowledge.LETTERS.index(item.answer["letter"])]
        assert f"{item.answer['letter']}) {gold}" in item.messages[0]["content"]
    letters = {i.answer["letter"] for i in MCQ}
    assert len(letters) >= 5  # the gold position is shuffled


@pytest.mark.parametrize(
    "content",
    [
        "ANSWER: D",
        "Reasoning...\n\nANSWER: D",
        "**ANSWER: D**",
        "ANSWER: (D)",
        "ANSWER: D.",
        "ANSWER: d",
        "ANSWER: D) opt3",
        "The options...\nANSWER:D",
    ],
)
def test_mcq_accepts_the_strict_line(content: str) -> None:
    assert knowledge.score_mcq(mcq(), Reply(content)).outcome == "correct"


@pytest.mark.parametrize(
    "content",
    [
        "The answer is D",  # a letter in prose is not the answer
        "ANSWER: D\nI hope that helps.",  # not the last line
        "I considered D and finally chose\nD",  # a trailing capital letter
        "ANSWER: D or E",
        "ANSWER: DE",
        "ANSWER: K",
        "ANSWER:",
        "ANSWER: D) opt4",  # letter with another option's text
        "Error: rate limited",
        "",
        "<think>ANSWER: D",  # unterminated think block
    ],
)
def test_mcq_near_misses_are_unparsed(content: str) -> None:
    assert knowledge.score_mcq(mcq(), Reply(content)).outcome == "unparsed"


def test_mcq_reasoning_is_never_read() -> None:
    assert knowledge.score_mcq(mcq(), Reply("", reasoning="ANSWER: D")).outcome == "unparsed"
    assert knowledge.score_mcq(mcq(), Reply("ANSWER: E", reasoning="ANSWER: D")).outcome == "wrong"
    assert knowledge.score_mcq(mcq(), Reply("D is tempting</think>\nANSWER: E")).outcome == "wrong"


def test_mcq_degenerate() -> None:
    assert (
        knowledge.score_mcq(mcq(), Reply("ANSWER: D", reasoning="D D D " * 50)).outcome
        == "degenerate"
    )


@pytest.mark.parametrize(
    "content,outcome",
    [
        ("ANSWER: Canberra", "correct"),
        ("ANSWER: canberra.", "correct"),
        ("ANSWER: **Canberra**", "correct"),
        ("ANSWER: Canberra, not Sydney", "wrong"),  # superset
        ("ANSWER: Canberra or Sydney", "wrong"),
        ("ANSWER: Sydney", "wrong"),
        ("The capital is Canberra.", "unparsed"),
        ("ANSWER: ...", "unparsed"),
    ],
)
def test_short_answer(content: str, outcome: str) -> None:
    assert knowledge.score_short(short("Canberra"), Reply(content)).outcome == outcome


def test_short_answer_aliases_and_accents() -> None:
    item = short("Brasília", "Brasilia")
    assert knowledge.score_short(item, Reply("ANSWER: Brasilia")).correct
    assert knowledge.score_short(item, Reply("ANSWER: BRASÍLIA")).correct
    assert knowledge.score_short(
        short("Naypyidaw", "Nay Pyi Taw"), Reply("ANSWER: Nay Pyi Taw")
    ).correct


@pytest.mark.parametrize(
    "content",
    ["ANSWER: 3 or 5", "ANSWER: 3,5", "ANSWER: 35.0", "ANSWER: -35", "ANSWER: 3 5", "ANSWER: 350"],
)
def test_numeric_near_misses_are_not_35(content: str) -> None:
    assert knowledge.score_short(short("35"), Reply(content)).outcome == "wrong"
    assert knowledge.score_short(short("35"), Reply("ANSWER: 35")).correct


def test_every_built_item_scores_its_own_gold() -> None:
    for item in ITEMS:
        if item.scorer == "knowledge_mcq":
            reply = Reply(f"Thinking.\nANSWER: {item.answer['letter']}")
            wrong = Reply("ANSWER: " + ("A" if item.answer["letter"] != "A" else "B"))
        else:
            reply = Reply(f"ANSWER: {item.answer['aliases'][0]}")
            wrong = Reply(f"ANSWER: {item.answer['aliases'][0]} and more")
        assert knowledge.SCORERS[item.scorer](item, reply).correct, item.id
        assert knowledge.SCORERS[item.scorer](item, wrong).outcome == "wrong", item.id
