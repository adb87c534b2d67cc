import json
import sys

import pytest

from evals.families import ifeval, ifeval_probes, ifeval_registry
from evals.item import Item, Reply

ITEMS = ifeval.build(0)


def item(*instructions: tuple[str, dict], prompt: str = "Write something.") -> Item:
    answer = {
        "instruction_id_list": [i for i, _ in instructions],
        "kwargs": [kw for _, kw in instructions],
        "prompt": prompt,
    }
    return Item("i", "ifeval", ({"role": "user", "content": prompt},), answer, "ifeval")


def test_the_reference_is_loaded_offline_and_leaves_no_stand_in() -> None:
    import nltk

    registry = ifeval_registry.registry()
    assert len(registry.instructions) == 25
    assert "lm_eval.tasks" not in sys.modules and "lm_eval" not in sys.modules
    assert nltk.download.__module__.startswith("nltk")  # the real one is back
    # Without punkt data on the machine the reference asks for it once; the ask is refused.
    assert set(registry.refused_downloads) <= {"punkt_tab"}


def test_every_offline_instruction_is_offered_and_has_probes() -> None:
    offered = set(ifeval_registry.offline_ids())
    assert offered == set(ifeval_registry.registry().instructions) - ifeval_registry.NEEDS_PUNKT
    assert "language:response_language" in offered
    assert {c.instruction for c in ifeval_probes.CASES} == offered


def _agreement(wrap: str) -> tuple[int, list[str]]:
    agree, misses = 0, []
    for case in ifeval_probes.CASES:
        reference = ifeval_probes.reference(case.instruction, case.kwargs, case.response)
        verdict = ifeval.score(item((case.instruction, case.kwargs)), Reply(wrap + case.response))
        if verdict.correct == reference:
            agree += 1
        else:
            misses.append(f"{case.instruction}/{case.label}")
    return agree, misses


@pytest.mark.parametrize("wrap", ["", "<think>Let me think, then answer.</think>"])
def test_headline_agrees_with_the_reference_on_at_least_99_percent(wrap: str) -> None:
    agree, misses = _agreement(wrap)
    assert agree / len(ifeval_probes.CASES) >= 0.99, misses


def test_built_items_agree_with_the_reference_on_constructed_answers() -> None:
    """Items of several instructions, answered with every probe of their first one: the
    suite's verdict on the item against the reference's over all its instructions."""
    pairs, agree = 0, 0
    for it in ITEMS:
        ids, kwargs = it.answer["instruction_id_list"], it.answer["kwargs"]
        for case in (c for c in ifeval_probes.CASES if c.instruction == ids[0]):
            reference = ifeval_probes.reference_all(ids, kwargs, case.response)
            pairs += 1
            agree += ifeval.score(it, Reply(case.response)).correct == reference
    assert pairs > 150 and agree / pairs >= 0.99


def test_the_probes_hold_the_known_tricks_with_the_references_verdicts() -> None:
    """Not guesses: each is what the reference says, and the suite says the same."""
    verdicts = {
        (c.instruction, c.label): ifeval_probes.reference(c.instruction, c.kwargs, c.response)
        for c in ifeval_probes.CASES
    }
    tricks = [
        ("language:response_language", "english"),
        ("change_case:english_capital", "german_caps"),
        ("change_case:english_lowercase", "german_lower"),
        ("length_constraints:number_words", "apostrophe"),
        ("length_constraints:number_paragraphs", "separator_at_end"),
        ("combination:two_responses", "separator_at_start"),
        ("combination:two_responses", "separator_at_end"),
    ]
    assert [verdicts[t] for t in tricks] == [False, False, False, False, True, True, True]
    for instruction, label in tricks:
        case = next(
            c for c in ifeval_probes.CASES if (c.instruction, c.label) == (instruction, label)
        )
        verdict = ifeval.score(item((instruction, case.kwargs)), Reply(case.response))
        assert verdict.correct == verdicts[(instruction, label)], (instruction, label)


def test_loose_is_the_references_relaxed_reading() -> None:
    it = item(
        ("startend:end_checker", {"end_phrase": "Any other questions?"}),
        ("punctuation:no_comma", {}),
    )
    v = ifeval.score(it, Reply("Some text here.\nAny other questions?\nHope this helps, friend!"))
    assert v.outcome == "wrong" and v.parts == {"strict": False, "loose": True}
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
    assert ifeval.score(it, Reply("  \n")).outcome == "unparsed"


def test_degenerate() -> None:
    assert (
        ifeval.score(item(("punctuation:no_comma", {})), Reply("la " * 100)).outcome == "degenerate"
    )


def test_builder_is_seeded_covers_every_instruction_and_avoids_the_references_conflicts() -> None:
    assert len(ITEMS) == 60
    assert [i.digest() for i in ifeval.build(0)] == [i.digest() for i in ITEMS]
    assert [i.digest() for i in ifeval.build(1)] != [i.digest() for i in ITEMS]
    seen = set()
    conflicts = ifeval_registry.registry().conflicts
    for it in ITEMS:
        ids, kwargs = it.answer["instruction_id_list"], it.answer["kwargs"]
        seen.update(ids)
        assert 1 <= len(ids) <= 3 and len(kwargs) == len(ids)
        for a in ids:
            for b in ids:
                if a is not b:
                    assert b not in conflicts.get(a, ()) and a not in conflicts.get(b, ()), (a, b)
        prompt = it.messages[0]["content"]
        assert it.answer["prompt"] == prompt
        for i, kw in zip(ids, kwargs, strict=True):
            assert ifeval_registry.describe(i, kw) in prompt
        json.dumps(it.answer)  # stored answers stay JSON
    assert seen == set(ifeval_registry.offline_ids())


def test_an_item_asks_the_references_own_wording() -> None:
    it = next(i for i in ITEMS if i.answer["instruction_id_list"][0] == "punctuation:no_comma")
    assert (
        "In your entire response, refrain from the use of any commas." in it.messages[0]["content"]
    )


def test_an_answer_the_reference_cannot_judge_is_not_correct_and_says_why() -> None:
    it = item(("keywords:frequency", {"keyword": "light", "frequency": 2, "relation": "between"}))
    verdict = ifeval.score(it, Reply("Light and light."))
    assert verdict.outcome == "wrong" and "the IFEval reference raised ValueError" in verdict.detail
