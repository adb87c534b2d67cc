"""The collapse detector: does a reply repeat itself instead of saying something?

The watchdog reads it on sampled live answers (`gateway/trust/capture.py`), the eval suite on
every scored reply and on the corruption tripwire (`evals/tripwire.py`); it
lives here, in the gateway, because it is on the serving path and needs nothing but `re`.

`degeneration` looks for collapse, not for bad answers. Text is split into
word, number and punctuation tokens; every number is replaced by its digit *pattern*
("111" and "222" are both "aaa", "123" is "abc"), so a run like "111 222 333 444" repeats
just as "!!!!" does. It fires on any of:

    repeated 6-grams     more than half of the 6-gram windows repeat an earlier window
                         (texts of at least 18 tokens)
    low distinct ratio   a 64-token window with fewer than 15% distinct tokens
    character run        one character (not whitespace, a markdown rule character or a digit)
                         16+ times
    digit loop           a digit string that repeats one unit of 1-8 digits for 128+ digits
                         ("000…", "121212…", "31415926" eight times over). A number is not
                         repetition: 10^16, 99999999999999999 and 100! (158 digits, 24 zeros
                         at the end) are answers, so digits get the loop rule's length, not
                         the character run's
    repeated-digit run   4+ consecutive numbers each one digit repeated ("111 222 333 444"),
                         separated by spaces, semicolons or a comma and a space (thousands
                         groups, "1,000,000", are one number)
    no content           three or more visible characters and no letter or digit at all
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN = re.compile(r"[^\W\d_]+|\d+|[^\w\s]")
_DIGITS = re.compile(r"\d+")
_ALNUM = re.compile(r"[^\W_]")  # a character that str.isalnum() accepts
_RULE_CHARS = set("-=_*#~`.|+ \t\n\r")
_CHAR_RUN = re.compile(r"(\S)\1{15,}")
_SEPARATOR = r"(?:\s+|;\s*|,\s+)"
_REPEATED_DIGIT_RUN = re.compile(rf"(?:\b(\d)\1+\b{_SEPARATOR}){{3,}}\b(\d)\2+\b")
LOOP_DIGITS = 128
_DIGIT_LOOP = re.compile(rf"(\d{{1,8}}?)\1{{{LOOP_DIGITS // 8 - 1},}}")

NGRAM = 6
MIN_NGRAM_TOKENS = 18
REPEAT_FRACTION = 0.5
WINDOW = 64
MIN_DISTINCT_RATIO = 0.15


@dataclass(frozen=True, slots=True)
class Degeneration:
    rule: str
    detail: str


# Unicode has more than ten decimal digits: a number may use up to all of them.
_LETTERS = "".join(chr(ord("a") + i) for i in range(512))


@functools.lru_cache(maxsize=4096)
def _digit_pattern(digits: str) -> str:
    """``"1231"`` → ``"#abca"``: a number as the pattern of its digits."""
    seen = "".join(dict.fromkeys(digits))  # the distinct digits, in order of first appearance
    return "#" + digits.translate(str.maketrans(seen, _LETTERS[: len(seen)]))


def tokens(text: str) -> list[str]:
    """Lower-cased word / number / punctuation tokens, numbers replaced by their digit pattern."""
    return [
        _digit_pattern(tok) if tok.isdigit() else tok for tok in _TOKEN.findall(text.casefold())
    ]


def repeated_ngram_fraction(toks: Sequence[str], n: int = NGRAM) -> float:
    """Fraction of n-gram windows that repeat an earlier window (0 when there are none)."""
    grams = list(zip(*(toks[i:] for i in range(n)), strict=False))
    if not grams:
        return 0.0
    # Every window but the first of each distinct n-gram repeats an earlier one.
    return (len(grams) - len(set(grams))) / len(grams)


def min_distinct_ratio(toks: Sequence[str], window: int = WINDOW) -> float | None:
    """Lowest distinct/total ratio over sliding windows; None when the text is shorter."""
    if len(toks) < window:
        return None
    counts: dict[str, int] = {}
    for tok in toks[:window]:
        counts[tok] = counts.get(tok, 0) + 1
    fewest = len(counts)
    for new, old in zip(toks[window:], toks, strict=False):
        counts[new] = counts.get(new, 0) + 1
        left = counts[old] - 1
        if left:
            counts[old] = left
        else:
            del counts[old]
        if len(counts) < fewest:
            fewest = len(counts)
    return fewest / window


def _character_rule(text: str) -> Degeneration | None:
    """The rules read on the characters: no content, a character run, a digit loop, a
    repeated-digit run."""
    if _ALNUM.search(text) is None and len("".join(text.split())) >= 3:
        return Degeneration("no_content", repr(text[:40]))
    for m in _CHAR_RUN.finditer(text):
        if m.group(1) not in _RULE_CHARS and not m.group(1).isdigit():
            return Degeneration("char_run", repr(m.group(0)[:40]))
    for m in _DIGIT_LOOP.finditer(text):
        if len(m.group(0)) >= LOOP_DIGITS:
            return Degeneration("digit_loop", f"{m.group(1)!r} repeated over {len(m.group(0))}")
    digit_run = _REPEATED_DIGIT_RUN.search(text)
    if digit_run:
        return Degeneration("digit_run", repr(digit_run.group(0)[:40]))
    return None


def _token_rule(toks: Sequence[str]) -> Degeneration | None:
    """The rules read on the tokens: repeated n-grams, a low distinct ratio."""
    if len(toks) >= MIN_NGRAM_TOKENS:
        frac = repeated_ngram_fraction(toks)
        if frac > REPEAT_FRACTION:
            return Degeneration("repeated_ngrams", f"{frac:.2f} of {NGRAM}-grams repeat")
    ratio = min_distinct_ratio(toks)
    if ratio is not None and ratio < MIN_DISTINCT_RATIO:
        return Degeneration("distinct_ratio", f"{ratio:.2f} distinct in a {WINDOW}-token window")
    return None


def degeneration(text: str | None) -> Degeneration | None:
    """The first collapse rule `text` trips, or None for a healthy (or empty) text."""
    if not text:
        return None
    return _character_rule(text) or _token_rule(tokens(text))


def reply_degeneration(content: str | None, reasoning: str | None) -> Degeneration | None:
    """The collapse rule the answer or the reasoning of a reply trips, if any (for scorers)."""
    return degeneration(content) or degeneration(reasoning)
