import json

import pytest

from evals.families import ifeval, ifeval_instructions
from evals.item import Item, Reply

ITEMS = ifeval.build(0)
PROSE = "the river runs past the mill. it is quiet here. we like it."

# kind -> (kwargs, a text that follows it, a near miss that does not)
CASES = {
    "punctuation:no_comma": ({}, PROSE, "the river runs, and the mill turns."),
    "change_case:english_lowercase": ({}, PROSE, "the river runs past the Mill."),
    "change_case:english_capital": ({}, "THE RIVER RUNS. IT IS 5 KM.", "THE RIVER RUNs."),
    "change_case:capital_word_frequency": (
        {"relation": "at least", "n": 2},
        "The RIVER is VERY wide.",
        "The RIVER is wide. A word.",
    ),
    "length_constraints:number_words": (
        {"relation": "less than", "n": 5},
        "one two three four",
        "one two three four five",
    ),
    "length_constraints:number_sentences": (
        {"relation": "at least", "n": 3},
        "One. Two! Three?",
        "One. Two and three.",
    ),
    "length_constraints:number_paragraphs": (
        {"n": 2},
        "First part.\n***\nSecond part.",
        "First part.\n***\n***\nSecond part.",
    ),
    "length_constraints:nth_paragraph_first_word": (
        {"n": 2, "i": 2, "word": "however"},
        "Intro.\n\nHowever, more.",
        "Intro.\n\nBut however, more.",
    ),
    "detectable_format:number_bullet_lists": (
        {"n": 2},
        "Points:\n* one\n* two",
        "Points:\n* one\n* two\n- three",
    ),
    "detectable_format:json_format": ({}, '```json\n{"a": 1}\n```', 'Here you go: {"a": 1}'),
    "detectable_format:title": ({}, "<<Rivers>>\nText.", "<<>>\nText."),
    "detectable_format:number_highlighted_sections": (
        {"n": 2},
        "A *first* and **second** point.",
        "A *first* point and ** ** nothing.",
    ),
    "detectable_format:multiple_sections": (
        {"n": 2, "splitter": "SECTION"},
        "SECTION 1\nA\nSECTION 2\nB",
        "SECTION 1\nA\nSection two\nB",
    ),
    "detectable_format:constrained_response": ({}, "My answer is yes.", "My answer is yes"),
    "detectable_content:number_placeholders": (
        {"n": 2},
        "Go to [address] at [time].",
        "Go to [address].",
    ),
    "detectable_content:postscript": (
        {"marker": "P.S."},
        "Hello.\n\nP.S. Bye.",
        "Hello.\n\nPS Bye.",
    ),
    "keywords:existence": (
        {"keywords": ["river", "lantern"]},
        "A lantern by the river.",
        "A lantern by the rivers.",
    ),
    "keywords:forbidden_words": (
        {"forbidden": ["very", "good"]},
        "An everyday goodness.",
        "A very fine day.",
    ),
    "keywords:frequency": (
        {"word": "light", "relation": "at least", "n": 2},
        "Light and light.",
        "Light and lights.",
    ),
    "keywords:letter_frequency": (
        {"letter": "b", "relation": "less than", "n": 3},
        "Bob ran.",
        "Bob is a bob.",
    ),
    "startend:end_checker": (
        {"phrase": "Any other questions?"},
        "Done. Any other questions?",
        "Done. Any other questions? Bye.",
    ),
    "startend:quotation": ({}, '"All of it."', '"All of it." he said'),
    "combination:repeat_prompt": (
        {"prompt_to_repeat": "Describe the water cycle."},
        "Describe the water cycle. Water evaporates.",
        "Sure! Describe the water cycle. Water evaporates.",
    ),
    "combination:two_responses": (
        {},
        "First answer.\n******\nSecond answer.",
        "Same.\n******\nSame.",
    ),
}


def test_every_kind_has_a_case() -> None:
    assert set(CASES) == set(ifeval.KINDS)
    assert len(ifeval.KINDS) == 24


@pytest.mark.parametrize("kind", sorted(CASES))
def test_checker_follows_and_near_miss(kind: str) -> None:
    kwargs, good, near_miss = CASES[kind]
    instruction = {"kind": kind, "kwargs": kwargs}
    assert ifeval.follows(good, instruction), good
    assert not ifeval.follows(near_miss, instruction), near_miss


def test_sentence_splitter() -> None:
    assert len(ifeval_instructions.sentences("Hi there. How are you? Fine!")) == 3
    assert len(ifeval_instructions.sentences("One sentence only")) == 1
    assert ifeval_instructions.sentences("") == []


def item(*instructions: tuple[str, dict]) -> Item:
    answer = {"instructions": [{"kind": k, "kwargs": kw} for k, kw in instructions]}
    return Item("i", "ifeval", (), answer, "ifeval")


def test_loose_strips_first_and_last_lines_and_markdown() -> None:
    it = item(("startend:end_checker", {"phrase": "That is all."}), ("punctuation:no_comma", {}))
    v = ifeval.score(it, Reply("Some text here.\nThat is all.\nHope this helps, friend!"))
    assert v.outcome == "wrong"
    assert v.parts == {"strict": False, "loose": True}
    v = ifeval.score(item(("startend:quotation", {})), Reply('**"All of it."**'))
    assert v.parts == {"strict": False, "loose": True}
    v = ifeval.score(item(("startend:quotation", {})), Reply('"All of it."'))
    assert v.outcome == "correct" and v.parts == {"strict": True, "loose": True}


def test_reasoning_is_not_graded() -> None:
    it = item(("punctuation:no_comma", {}))
    assert ifeval.score(it, Reply("no commas here", reasoning="well, first, ...")).correct
    assert ifeval.score(it, Reply("well, first</think>no commas here")).correct
    assert ifeval.score(it, Reply("<think>well, first")).outcome == "unparsed"
    assert ifeval.score(it, Reply(None)).outcome == "unparsed"


def test_degenerate() -> None:
    assert (
        ifeval.score(item(("punctuation:no_comma", {})), Reply("la " * 100)).outcome == "degenerate"
    )


def test_builder_is_seeded_covers_every_kind_and_avoids_conflicts() -> None:
    assert len(ITEMS) == 60
    assert [i.digest() for i in ifeval.build(0)] == [i.digest() for i in ITEMS]
    assert [i.digest() for i in ifeval.build(1)] != [i.digest() for i in ITEMS]
    seen = set()
    for it in ITEMS:
        kinds = [i["kind"] for i in it.answer["instructions"]]
        seen.update(kinds)
        assert 1 <= len(kinds) <= 3
        for a in kinds:
            for b in kinds:
                if a is not b:
                    assert not ifeval.conflicts(a, b), (a, b)
        for instruction in it.answer["instructions"]:
            assert (
                ifeval.describe(instruction["kind"], instruction["kwargs"])
                in it.messages[0]["content"]
            )
        json.dumps(it.answer)  # stored answers stay JSON
    assert seen == set(ifeval.KINDS)


def test_conflict_table() -> None:
    assert ifeval.conflicts("change_case:english_lowercase", "change_case:english_capital")
    assert ifeval.conflicts("detectable_format:json_format", "length_constraints:number_paragraphs")
    assert ifeval.conflicts("startend:end_checker", "detectable_content:postscript")
    assert not ifeval.conflicts("punctuation:no_comma", "keywords:existence")
