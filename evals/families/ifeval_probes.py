"""Constructed answers for IFEval instructions, and the reference's verdict on them.

Used by the tests and by `bench/scorer_agreement.py` to measure how often the ifeval family's
headline agrees with IFEval's reference (lm-eval's registry). Per offered instruction: answers
that follow it, near misses, and the known tricks — `language:response_language`, capitals or
lowercase that are not English, words counted as `\\w+` runs ("don't" is two words), `***` and
`******` separators at the ends, postscript spellings, keywords inside longer words.

`reference` asks the reference's checker classes directly (`INSTRUCTION_DICT[id]`,
`build_description`, `check_following`, with the strict rule's empty-answer refusal); it does
not go through the family's scorer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evals.families.ifeval_registry import registry

PROSE = "the river runs past the mill. it is quiet here. we like it."
GERMAN = "Der Fluss fließt langsam an der alten Mühle vorbei, und am Abend ist es dort sehr still."
FRENCH = "La rivière coule lentement devant le vieux moulin et le soir tout est très calme."
CAPS_GERMAN = "DER FLUSS FLIESST LANGSAM AN DER ALTEN MÜHLE VORBEI UND ES IST SEHR STILL."


@dataclass(frozen=True, slots=True)
class Case:
    instruction: str
    kwargs: dict[str, Any]
    label: str
    response: str


def _cases(instruction: str, kwargs: dict[str, Any], **responses: str) -> list[Case]:
    return [Case(instruction, kwargs, label, text) for label, text in responses.items()]


CASES: list[Case] = [
    *_cases(
        "language:response_language",
        {"language": "de"},
        german=GERMAN,
        english=PROSE,
        french=FRENCH,
        digits_only="12345 67890",
    ),
    *_cases(
        "change_case:english_capital",
        {},
        english_caps="THE RIVER RUNS PAST THE MILL AND IT IS VERY QUIET THERE IN THE EVENING.",
        german_caps=CAPS_GERMAN,
        one_lower="THE RIVER RUNS PAST THE MILL AND IT IS VERY QUIET THERe IN THE EVENING.",
    ),
    *_cases(
        "change_case:english_lowercase",
        {},
        english_lower=PROSE,
        german_lower=GERMAN.lower(),
        one_capital="the river runs past the Mill. it is quiet here. we like it.",
    ),
    *_cases(
        "punctuation:no_comma",
        {},
        plain=PROSE,
        comma="the river runs, and the mill turns.",
        fullwidth_comma="the river runs， and the mill turns.",
    ),
    *_cases(
        "length_constraints:number_words",
        {"num_words": 5, "relation": "less than"},
        four="one two three four",
        five="one two three four five",
        apostrophe="don't stop it now",
        hyphen="a well-known mill here",
        underscore="a snake_case name here",
    ),
    *_cases(
        "length_constraints:number_words",
        {"num_words": 5, "relation": "at least"},
        five="one two three four five",
        contraction_makes_five="we don't like it",
    ),
    *_cases(
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        two="First part.\n***\nSecond part.",
        empty_middle="First part.\n***\n***\nSecond part.",
        separator_at_start="***\nFirst part.\n***\nSecond part.",
        separator_at_end="First part.\n***\nSecond part.\n***",
        three="One.\n***\nTwo.\n***\nThree.",
    ),
    *_cases(
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
        follows="Intro.\n\nHowever, more.",
        not_first="Intro.\n\nBut however, more.",
        quoted_word='Intro.\n\n"However," she said.',
        three_paragraphs="Intro.\n\nHowever, more.\n\nEnd.",
    ),
    *_cases(
        "detectable_format:number_bullet_lists",
        {"num_bullets": 2},
        stars="Points:\n* one\n* two",
        mixed_three="Points:\n* one\n* two\n- three",
        dashes="- one\n- two",
        bold_not_bullet="**bold**\n* one\n* two",
    ),
    *_cases(
        "detectable_format:json_format",
        {},
        fenced='```json\n{"a": 1}\n```',
        bare='{"a": [1, 2]}',
        prefixed='Here you go: {"a": 1}',
        fenced_upper='```JSON\n{"a": 1}\n```',
    ),
    *_cases(
        "detectable_format:title",
        {},
        title="<<Rivers>>\nText.",
        empty_title="<<>>\nText.",
        multiline="<<Riv\ners>>\nText.",
    ),
    *_cases(
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        single_and_double="A *first* and **second** point.",
        one_empty="A *first* point and ** ** nothing.",
        across_lines="A *first\npoint* here.",
    ),
    *_cases(
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        two="SECTION 1\nA\nSECTION 2\nB",
        spelled="SECTION 1\nA\nSECTION two\nB",
        lower_case="section 1\nA\nsection 2\nB",
    ),
    *_cases(
        "detectable_format:constrained_response",
        {},
        exact="My answer is yes.",
        no_period="My answer is yes",
        embedded="Well. My answer is maybe. Thanks.",
    ),
    *_cases(
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        two="Go to [address] at [time].",
        one="Go to [address].",
        empty_brackets="Go to [] at [].",
    ),
    *_cases(
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        ps="Hello.\n\nP.S. Bye.",
        no_dots="Hello.\n\nPS Bye.",
        lower="Hello.\n\np.s. bye.",
        spaced="Hello.\n\nP. S. Bye.",
    ),
    *_cases(
        "detectable_content:postscript",
        {"postscript_marker": "P.P.S"},
        pps="Hello.\n\nP.P.S Bye.",
        ps_only="Hello.\n\nP.S. Bye.",
    ),
    *_cases(
        "keywords:existence",
        {"keywords": ["river", "lantern"]},
        both="A lantern by the river.",
        inside_words="Lanterns by the rivers.",
        one="A lantern by the sea.",
    ),
    *_cases(
        "keywords:forbidden_words",
        {"forbidden_words": ["very", "good"]},
        absent="An everyday day.",
        inside_word="An everyday goodness.",
        present="A very fine day.",
    ),
    *_cases(
        "keywords:frequency",
        {"keyword": "light", "frequency": 2, "relation": "at least"},
        twice="Light and light.",
        inside_word="Light and lights.",
        once="Light and dark.",
    ),
    *_cases(
        "keywords:letter_frequency",
        {"letter": "b", "let_frequency": 3, "let_relation": "less than"},
        two="Bob ran.",
        four="Bob is a bob.",
    ),
    *_cases(
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        ends="Done. Any other questions?",
        trailing_word="Done. Any other questions? Bye.",
        trailing_space="Done. Any other questions?  \n",
        lower="Done. any other questions?",
    ),
    *_cases(
        "startend:quotation",
        {},
        quoted='"All of it."',
        trailing='"All of it." he said',
        single_quote_char='"',
    ),
    *_cases(
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Describe the water cycle."},
        repeats="Describe the water cycle. Water evaporates.",
        preamble="Sure! Describe the water cycle. Water evaporates.",
        case="describe THE water cycle. Water evaporates.",
    ),
    *_cases(
        "combination:two_responses",
        {},
        two="First answer.\n******\nSecond answer.",
        same="Same.\n******\nSame.",
        separator_at_start="******\nFirst answer.\n******\nSecond answer.",
        separator_at_end="First answer.\n******\nSecond answer.\n******",
        empty_middle="First.\n******\n\n******\nSecond.",
        three="A.\n******\nB.\n******\nC.",
    ),
]


def reference(instruction: str, kwargs: dict[str, Any], response: str) -> bool:
    """The reference's strict verdict on one instruction (an empty answer never follows)."""
    checker = registry().instructions[instruction](instruction)
    checker.build_description(**{k: v for k, v in kwargs.items() if v})
    return bool(response.strip() and checker.check_following(response))


def reference_all(ids: list[str], kwargs: list[dict[str, Any]], response: str) -> bool:
    return all(reference(i, kw, response) for i, kw in zip(ids, kwargs, strict=True))
