"""How the ifeval family draws the arguments of each IFEval instruction it asks.

The instructions, their wording and their checks are the reference's (`ifeval_registry`:
lm-eval's IFEval registry); this module only says, per instruction id, which arguments to give
its `build_description`, drawn with the family's seeded generator so that an item set is the
same for a seed on every machine. Argument names are the reference's; the ranges follow the
reference's own random defaults (`lm_eval/tasks/ifeval/instructions.py`), kept a little
narrower where the reference's extremes make poor short-answer tasks (500-word minimums,
20 highlighted sections).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

KEYWORDS = ("network", "balance", "river", "lantern", "harvest", "mirror", "compass", "signal")
FORBIDDEN = ("very", "really", "thing", "good", "important", "also", "many", "just")
FREQUENT = ("light", "time", "change", "future", "simple")
END_PHRASES = ("Any other questions?", "Is there anything else I can help with?")
FIRST_WORDS = ("today", "however", "first", "finally", "imagine")
LANGUAGES = ("de", "es", "fr", "it", "pt")
RELATIONS = ("less than", "at least")

Draw = Callable[[random.Random, str], dict[str, Any]]


def _none(rng: random.Random, task: str) -> dict[str, Any]:
    return {}


def _nth_paragraph(rng: random.Random, task: str) -> dict[str, Any]:
    n = rng.randint(2, 4)
    return {
        "num_paragraphs": n,
        "nth_paragraph": rng.randint(1, n),
        "first_word": rng.choice(FIRST_WORDS),
    }


DRAWS: dict[str, Draw] = {
    "keywords:existence": lambda rng, task: {"keywords": rng.sample(KEYWORDS, 2)},
    "keywords:frequency": lambda rng, task: {
        "keyword": rng.choice(FREQUENT),
        "frequency": rng.randint(1, 4),
        "relation": rng.choice(RELATIONS),
    },
    "keywords:forbidden_words": lambda rng, task: {"forbidden_words": rng.sample(FORBIDDEN, 2)},
    "keywords:letter_frequency": lambda rng, task: {
        "letter": rng.choice("bcdfgkmpwy"),
        "let_frequency": rng.randint(3, 10),
        "let_relation": rng.choice(RELATIONS),
    },
    "language:response_language": lambda rng, task: {"language": rng.choice(LANGUAGES)},
    "length_constraints:number_paragraphs": lambda rng, task: {"num_paragraphs": rng.randint(2, 4)},
    "length_constraints:number_words": lambda rng, task: rng.choice(
        [
            {"num_words": rng.randint(100, 250), "relation": "at least"},
            {"num_words": rng.randint(120, 300), "relation": "less than"},
        ]
    ),
    "length_constraints:nth_paragraph_first_word": _nth_paragraph,
    "detectable_content:number_placeholders": lambda rng, task: {
        "num_placeholders": rng.randint(1, 4)
    },
    "detectable_content:postscript": lambda rng, task: {
        "postscript_marker": rng.choice(["P.S.", "P.P.S"])
    },
    "detectable_format:number_bullet_lists": lambda rng, task: {"num_bullets": rng.randint(2, 5)},
    "detectable_format:constrained_response": _none,
    "detectable_format:number_highlighted_sections": lambda rng, task: {
        "num_highlights": rng.randint(1, 4)
    },
    "detectable_format:multiple_sections": lambda rng, task: {
        "section_spliter": rng.choice(["Section", "SECTION"]),
        "num_sections": rng.randint(2, 4),
    },
    "detectable_format:json_format": _none,
    "detectable_format:title": _none,
    "combination:two_responses": _none,
    "combination:repeat_prompt": lambda rng, task: {"prompt_to_repeat": task},
    "startend:end_checker": lambda rng, task: {"end_phrase": rng.choice(END_PHRASES)},
    "change_case:english_capital": _none,
    "change_case:english_lowercase": _none,
    "punctuation:no_comma": _none,
    "startend:quotation": _none,
}
