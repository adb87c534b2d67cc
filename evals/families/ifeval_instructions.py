"""The ifeval family's instructions: the 24 checker kinds (IFEval's taxonomy, re-implemented
without nltk or any download), each with its wording, its check on the answer and how its
arguments are drawn; the text measures they read; and which pairs cannot both hold
(`conflicts`). `evals.families.ifeval` builds the items and scores them."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEYWORDS = ("network", "balance", "river", "lantern", "harvest", "mirror", "compass", "signal")
FORBIDDEN = ("very", "really", "thing", "good", "important", "also", "many", "just")
FREQUENT = ("light", "time", "change", "future", "simple")
END_PHRASES = ("Is there anything else I can help with?", "Any other questions?", "That is all.")
RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
FIRST_WORDS = ("today", "however", "first", "finally", "imagine")
RELATIONS = ("at least", "less than")

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)")


# ----------------------------------------------------------------------------- text measures


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    """A regex sentence splitter: ., ! or ? followed by whitespace ends a sentence."""
    return [s for s in _SENTENCE_END.split(text.strip()) if _WORD.search(s)]


def _compare(count: int, relation: str, n: int) -> bool:
    return count >= n if relation == "at least" else count < n


def _word_count(text: str, word: str) -> int:
    return len(re.findall(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE))


def _strip_fences(text: str) -> str:
    text = text.strip()
    text = re.sub(r"^```(?:json|JSON|Json)?\s*", "", text)
    return re.sub(r"\s*```$", "", text).strip()


# ----------------------------------------------------------------------------- checkers

Check = Callable[[str, dict[str, Any]], bool]
Draw = Callable[[random.Random, str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Kind:
    describe: str  # formatted with the kwargs
    check: Check
    draw: Draw


def _no_kwargs(rng: random.Random, task: str) -> dict[str, Any]:
    return {}


def _relation(lo: int, hi: int) -> Draw:
    return lambda rng, task: {"relation": rng.choice(RELATIONS), "n": rng.randint(lo, hi)}


def _paragraphs_stars(text: str, kw: dict[str, Any]) -> bool:
    parts = re.split(r"\s?\*\*\*\s?", text)
    if any(not p.strip() for p in parts[1:-1]):
        return False
    return len([p for p in parts if p.strip()]) == kw["n"]


def _nth_paragraph(text: str, kw: dict[str, Any]) -> bool:
    paras = re.split(r"\n\s*\n", text.strip())
    if len(paras) != kw["n"] or any(not p.strip() for p in paras):
        return False
    first = words(paras[kw["i"] - 1])
    return bool(first) and first[0].casefold() == kw["word"]


def _bullets(text: str, kw: dict[str, Any]) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == kw["n"]


def _json(text: str, kw: dict[str, Any]) -> bool:
    try:
        json.loads(_strip_fences(text))
    except ValueError:
        return False
    return True


def _highlights(text: str, kw: dict[str, Any]) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h.strip("*").strip()]
    return len(single) + len(double) >= kw["n"]


def _sections(text: str, kw: dict[str, Any]) -> bool:
    parts = re.split(rf"\s?{kw['splitter']}\s?\d+\s?", text)
    return len(parts) - 1 >= kw["n"]


def _two_responses(text: str, kw: dict[str, Any]) -> bool:
    parts = text.split("******")
    nonempty = [p.strip() for p in parts if p.strip()]
    return len(parts) == 2 and len(nonempty) == 2 and nonempty[0] != nonempty[1]


def _caps_words(text: str) -> int:
    return sum(1 for w in words(text) if len(w) > 1 and w.isupper())


KINDS: dict[str, Kind] = {
    "punctuation:no_comma": Kind(
        "Do not use any commas anywhere in your response.",
        lambda t, kw: "," not in t and "，" not in t,
        _no_kwargs,
    ),
    "change_case:english_lowercase": Kind(
        "Write your entire response in English using lowercase letters only; no capital "
        "letters are allowed.",
        lambda t, kw: t == t.lower() and any(c.isalpha() for c in t),
        _no_kwargs,
    ),
    "change_case:english_capital": Kind(
        "Write your entire response in English using capital letters only.",
        lambda t, kw: t == t.upper() and any(c.isalpha() for c in t),
        _no_kwargs,
    ),
    "change_case:capital_word_frequency": Kind(
        "Use words written entirely in capital letters {relation} {n} times.",
        lambda t, kw: _compare(_caps_words(t), kw["relation"], kw["n"]),
        _relation(2, 6),
    ),
    "length_constraints:number_words": Kind(
        "Your response should contain {relation} {n} words.",
        lambda t, kw: _compare(len(words(t)), kw["relation"], kw["n"]),
        lambda rng, task: rng.choice(
            [
                {"relation": "at least", "n": rng.randint(100, 250)},
                {"relation": "less than", "n": rng.randint(120, 300)},
            ]
        ),
    ),
    "length_constraints:number_sentences": Kind(
        "Your response should contain {relation} {n} sentences.",
        lambda t, kw: _compare(len(sentences(t)), kw["relation"], kw["n"]),
        lambda rng, task: rng.choice(
            [
                {"relation": "at least", "n": rng.randint(3, 7)},
                {"relation": "less than", "n": rng.randint(8, 15)},
            ]
        ),
    ),
    "length_constraints:number_paragraphs": Kind(
        "Your response must have exactly {n} paragraphs, separated from each other by the "
        "markdown divider ***.",
        _paragraphs_stars,
        lambda rng, task: {"n": rng.randint(2, 4)},
    ),
    "length_constraints:nth_paragraph_first_word": Kind(
        "Your response must have exactly {n} paragraphs, separated by blank lines, and "
        'paragraph {i} must begin with the word "{word}".',
        _nth_paragraph,
        lambda rng, task: (
            lambda n: {"n": n, "i": rng.randint(1, n), "word": rng.choice(FIRST_WORDS)}
        )(rng.randint(2, 4)),
    ),
    "detectable_format:number_bullet_lists": Kind(
        "Your answer must contain exactly {n} bullet points, written as markdown list items "
        "such as:\n* This is a point.\n* This is another point.",
        _bullets,
        lambda rng, task: {"n": rng.randint(2, 5)},
    ),
    "detectable_format:json_format": Kind(
        "Your entire output must be valid JSON; you may wrap it in a markdown code fence.",
        _json,
        _no_kwargs,
    ),
    "detectable_format:title": Kind(
        "Your answer must include a title wrapped in double angle brackets, such as <<my title>>.",
        lambda t, kw: any(m.strip() for m in re.findall(r"<<([^\n]+?)>>", t)),
        _no_kwargs,
    ),
    "detectable_format:number_highlighted_sections": Kind(
        "Highlight at least {n} sections of your answer with markdown, for example "
        "*highlighted section*.",
        _highlights,
        lambda rng, task: {"n": rng.randint(1, 4)},
    ),
    "detectable_format:multiple_sections": Kind(
        "Your response must have {n} sections. Mark the beginning of each section with "
        "{splitter} X, where X is the section number.",
        _sections,
        lambda rng, task: {"n": rng.randint(2, 4), "splitter": rng.choice(["SECTION", "PART"])},
    ),
    "detectable_format:constrained_response": Kind(
        "Answer with one of the following options: " + " ".join(f'"{o}"' for o in RESPONSE_OPTIONS),
        lambda t, kw: any(o in t for o in RESPONSE_OPTIONS),
        _no_kwargs,
    ),
    "detectable_content:number_placeholders": Kind(
        "The response must contain at least {n} placeholders in square brackets, such as "
        "[address].",
        lambda t, kw: len(re.findall(r"\[.*?\]", t)) >= kw["n"],
        lambda rng, task: {"n": rng.randint(1, 4)},
    ),
    "detectable_content:postscript": Kind(
        "At the end of your response, add a postscript starting with {marker}",
        lambda t, kw: bool(
            re.search(
                r"\s*p\.\s?p\.\s?s.*$" if kw["marker"] == "P.P.S" else r"\s*p\.\s?s\..*$",
                t.lower(),
                flags=re.MULTILINE,
            )
        ),
        lambda rng, task: {"marker": rng.choice(["P.S.", "P.P.S"])},
    ),
    "keywords:existence": Kind(
        "Include the keywords {keywords} in the response.",
        lambda t, kw: all(_word_count(t, w) for w in kw["keywords"]),
        lambda rng, task: {"keywords": rng.sample(KEYWORDS, 2)},
    ),
    "keywords:forbidden_words": Kind(
        "Do not include the words {forbidden} in the response.",
        lambda t, kw: not any(_word_count(t, w) for w in kw["forbidden"]),
        lambda rng, task: {"forbidden": rng.sample(FORBIDDEN, 2)},
    ),
    "keywords:frequency": Kind(
        'In your response, the word "{word}" should appear {relation} {n} times.',
        lambda t, kw: _compare(_word_count(t, kw["word"]), kw["relation"], kw["n"]),
        lambda rng, task: {
            "word": rng.choice(FREQUENT),
            "relation": rng.choice(RELATIONS),
            "n": rng.randint(1, 4),
        },
    ),
    "keywords:letter_frequency": Kind(
        'In your response, the letter "{letter}" should appear {relation} {n} times.',
        lambda t, kw: _compare(t.lower().count(kw["letter"]), kw["relation"], kw["n"]),
        lambda rng, task: {
            "letter": rng.choice("bcdfgkmpwy"),
            "relation": rng.choice(RELATIONS),
            "n": rng.randint(3, 12),
        },
    ),
    "startend:end_checker": Kind(
        'Finish your response with this exact phrase: "{phrase}". No other words should follow it.',
        lambda t, kw: t.strip().lower().endswith(kw["phrase"].lower()),
        lambda rng, task: {"phrase": rng.choice(END_PHRASES)},
    ),
    "startend:quotation": Kind(
        "Wrap your entire response in double quotation marks.",
        lambda t, kw: len(t.strip()) > 1 and t.strip()[0] == '"' and t.strip()[-1] == '"',
        _no_kwargs,
    ),
    "combination:repeat_prompt": Kind(
        "First repeat the request word for word without change, then give your answer. Do not "
        "say anything before repeating the request; the request to repeat is only the first "
        "paragraph of this message.",
        lambda t, kw: t.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower()),
        lambda rng, task: {"prompt_to_repeat": task},
    ),
    "combination:two_responses": Kind(
        "Give two different responses. Separate the responses with six asterisk symbols: ******.",
        _two_responses,
        _no_kwargs,
    ),
}

_WHOLE = {
    "detectable_format:json_format",
    "detectable_format:constrained_response",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:quotation",
}
_STRUCTURE = {
    "length_constraints:number_paragraphs",
    "length_constraints:nth_paragraph_first_word",
    "length_constraints:number_sentences",
    "detectable_format:multiple_sections",
    "detectable_format:number_bullet_lists",
    "detectable_format:title",
    "detectable_format:number_highlighted_sections",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "startend:end_checker",
}
_CASE = {
    "change_case:english_lowercase",
    "change_case:english_capital",
    "change_case:capital_word_frequency",
}
_PAIRS = {
    ("length_constraints:number_paragraphs", "length_constraints:nth_paragraph_first_word"),
    ("length_constraints:number_paragraphs", "detectable_format:multiple_sections"),
    ("length_constraints:nth_paragraph_first_word", "detectable_format:multiple_sections"),
    ("detectable_content:postscript", "startend:end_checker"),
    ("detectable_format:json_format", "punctuation:no_comma"),
    ("detectable_format:constrained_response", "change_case:english_lowercase"),
    ("detectable_format:constrained_response", "change_case:english_capital"),
    ("detectable_format:constrained_response", "length_constraints:number_words"),
    ("detectable_format:constrained_response", "keywords:existence"),
    ("detectable_format:constrained_response", "keywords:frequency"),
    ("detectable_format:constrained_response", "keywords:letter_frequency"),
    ("detectable_format:constrained_response", "change_case:capital_word_frequency"),
    ("change_case:english_lowercase", "detectable_format:multiple_sections"),
}


def conflicts(a: str, b: str) -> bool:
    """Whether instructions `a` and `b` cannot (sensibly) both hold."""
    if a == b:
        return True
    if {a, b} <= _WHOLE or {a, b} <= _CASE:
        return True
    if (a in _WHOLE and b in _STRUCTURE) or (b in _WHOLE and a in _STRUCTURE):
        return True
    return (a, b) in _PAIRS or (b, a) in _PAIRS


def describe(kind: str, kwargs: dict[str, Any]) -> str:
    shown = {k: ", ".join(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return KINDS[kind].describe.format(**shown)
