"""The corruption tripwire: 20 fixed prompts, a repetition detector and expected substrings.

Run on every configuration before anything else is measured. Each prompt goes through the
model's own chat template (the chat endpoint) and gets one of three verdicts:

    degenerate   the reply (answer or reasoning) trips the repetition detector, or is empty
                 and stopped on length
    wrong        no expected substring in the answer
    ok           an expected substring is there

The detector (`degeneration`) looks for collapse, not for bad answers. Text is split into
word, number and punctuation tokens; every number is replaced by its digit *pattern*
("111" and "222" are both "aaa", "123" is "abc"), so a run like "111 222 333 444" repeats
just as "!!!!" does. It fires on any of:

    repeated 6-grams     more than half of the 6-gram windows repeat an earlier window
                         (texts of at least 18 tokens)
    low distinct ratio   a 64-token window with fewer than 15% distinct tokens
    character run        one character (not whitespace or markdown rule characters) 16+ times
    repeated-digit run   4+ consecutive numbers each one digit repeated ("111 222 333 444")
    no content           three or more visible characters and no letter or digit at all

A configuration is `degenerate` when more than `max_degenerate` prompts are, else `wrong` when
more than `max_wrong` are, else `ok`. The defaults (1 and 2) are for capable models; a very
small model answers many prompts wrongly while healthy, so judge it against its own reference
configuration rather than the defaults — the tripwire's job is the degenerate count.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["ok", "degenerate", "wrong"]

_TOKEN = re.compile(r"[^\W\d_]+|\d+|[^\w\s]")
_DIGITS = re.compile(r"\d+")
_ALNUM = re.compile(r"[^\W_]")  # a character that str.isalnum() accepts
_RULE_CHARS = set("-=_*#~`.|+ \t\n\r")
_CHAR_RUN = re.compile(r"(\S)\1{15,}")
_REPEATED_DIGIT_RUN = re.compile(r"(?:\b(\d)\1+\b[\s,;]+){3,}\b(\d)\2+\b")

NGRAM = 6
MIN_NGRAM_TOKENS = 18
REPEAT_FRACTION = 0.5
WINDOW = 64
MIN_DISTINCT_RATIO = 0.15


@dataclass(frozen=True, slots=True)
class Prompt:
    """A tripwire prompt; the answer passes if it contains any of `expected` (see `contains`)."""

    text: str
    expected: tuple[str, ...]
    case_sensitive: bool = False


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


def contains(answer: str, expected: str, case_sensitive: bool = False) -> bool:
    """Whether `answer` holds `expected`: a number must be a whole number token ("8" is not
    in "80" or "-18.0"); a word or phrase must start at a word boundary ("thank" is in
    "thanks"). Case-folded unless `case_sensitive`."""
    if _NUMBER.fullmatch(expected):
        return expected in _NUMBER.findall(answer)
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.search(rf"(?<!\w){re.escape(expected)}", answer, flags) is not None


PROMPTS: tuple[Prompt, ...] = (
    Prompt("What is the capital of France? Answer in one word.", ("paris",)),
    Prompt("What is 12 + 30? Reply with the number only.", ("42",)),
    Prompt("How many legs does a spider have?", ("8", "eight")),
    Prompt("Which planet is the largest in our solar system?", ("jupiter",)),
    Prompt("What colour is a clear daytime sky?", ("blue",)),
    Prompt("Who wrote the play Romeo and Juliet?", ("shakespeare",)),
    Prompt("What is the chemical formula of water?", ("h2o", "h₂o")),
    Prompt("What is the opposite of the word 'hot'?", ("cold",)),
    Prompt("How many days are there in a week?", ("7", "seven")),
    Prompt("Continue the sequence: one, two, three, ...", ("four",)),
    Prompt("What is the square root of 81?", ("9", "nine")),
    Prompt("Translate the French word 'merci' into English.", ("thank",)),
    Prompt("What gas do plants absorb from the air for photosynthesis?", ("carbon dioxide", "co2")),
    Prompt("Write the word 'hello' in capital letters.", ("HELLO",), case_sensitive=True),
    Prompt("Name the animal that says 'moo'.", ("cow",)),
    Prompt("What is the freezing point of water in degrees Celsius?", ("0", "zero")),
    Prompt(
        "Write a Python function named double that returns its argument times two.", ("def double",)
    ),
    Prompt("In which continent is Kenya?", ("africa",)),
    Prompt("Write two sentences about the ocean.", ("ocean", "sea")),
    Prompt("What is 7 times 8?", ("56",)),
)


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


def degeneration(text: str | None) -> Degeneration | None:
    """The first collapse rule `text` trips, or None for a healthy (or empty) text."""
    if not text:
        return None
    if _ALNUM.search(text) is None and len("".join(text.split())) >= 3:
        return Degeneration("no_content", repr(text[:40]))
    for m in _CHAR_RUN.finditer(text):
        if m.group(1) not in _RULE_CHARS:
            return Degeneration("char_run", repr(m.group(0)[:40]))
    digit_run = _REPEATED_DIGIT_RUN.search(text)
    if digit_run:
        return Degeneration("digit_run", repr(digit_run.group(0)[:40]))
    toks = tokens(text)
    if len(toks) >= MIN_NGRAM_TOKENS:
        frac = repeated_ngram_fraction(toks)
        if frac > REPEAT_FRACTION:
            return Degeneration("repeated_ngrams", f"{frac:.2f} of {NGRAM}-grams repeat")
    ratio = min_distinct_ratio(toks)
    if ratio is not None and ratio < MIN_DISTINCT_RATIO:
        return Degeneration("distinct_ratio", f"{ratio:.2f} distinct in a {WINDOW}-token window")
    return None


@dataclass(frozen=True, slots=True)
class PromptResult:
    prompt: Prompt
    verdict: Verdict
    detail: str = ""
    content: str | None = None


def judge(
    prompt: Prompt,
    content: str | None,
    reasoning: str | None = None,
    finish_reason: str | None = None,
) -> PromptResult:
    """The verdict for one reply to one tripwire prompt (pure)."""
    for text in (content, reasoning):
        found = degeneration(text)
        if found:
            return PromptResult(prompt, "degenerate", f"{found.rule}: {found.detail}", content)
    if not content and finish_reason == "length":
        return PromptResult(prompt, "degenerate", "empty answer, stopped on length", content)
    if any(contains(content or "", exp, prompt.case_sensitive) for exp in prompt.expected):
        return PromptResult(prompt, "ok", "", content)
    return PromptResult(prompt, "wrong", f"none of {list(prompt.expected)}", content)


@dataclass(frozen=True, slots=True)
class TripwireReport:
    results: tuple[PromptResult, ...]
    max_degenerate: int = 1
    max_wrong: int = 2
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        counts = Counter(r.verdict for r in self.results)
        object.__setattr__(self, "counts", {v: counts[v] for v in ("ok", "degenerate", "wrong")})

    @property
    def verdict(self) -> Verdict:
        if self.counts["degenerate"] > self.max_degenerate:
            return "degenerate"
        if self.counts["wrong"] > self.max_wrong:
            return "wrong"
        return "ok"

    def line(self) -> str:
        c = self.counts
        return (
            f"{self.verdict} ({c['ok']} ok, {c['degenerate']} degenerate, "
            f"{c['wrong']} wrong of {len(self.results)})"
        )


def _reasoning_of(message: Any) -> str | None:
    """vLLM renamed `reasoning_content` to `reasoning`; read both."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if value is None:
            value = (getattr(message, "model_extra", None) or {}).get(name)
        if value:
            return str(value)
    return None


async def run_tripwire(
    client: Any,
    model: str,
    *,
    prompts: Sequence[Prompt] = PROMPTS,
    max_tokens: int = 512,
    temperature: float | None = 0.0,
    concurrency: int = 4,
    max_degenerate: int = 1,
    max_wrong: int = 2,
    extra_body: dict[str, Any] | None = None,
) -> TripwireReport:
    """Send every prompt through `client` (an `openai.AsyncOpenAI`) and judge the replies.

    `temperature=None` leaves sampling to the target's profile (the gateway fills it in).
    """
    gate = asyncio.Semaphore(concurrency)
    sampling: dict[str, Any] = {} if temperature is None else {"temperature": temperature}

    async def one(prompt: Prompt) -> PromptResult:
        async with gate:
            resp = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt.text}],
                max_tokens=max_tokens,
                extra_body=extra_body,
                **sampling,
            )
        choice = resp.choices[0]
        message = choice.message
        return judge(prompt, message.content, _reasoning_of(message), choice.finish_reason)

    results = await asyncio.gather(*(one(p) for p in prompts))
    return TripwireReport(tuple(results), max_degenerate=max_degenerate, max_wrong=max_wrong)


def reply_degeneration(content: str | None, reasoning: str | None) -> Degeneration | None:
    """The collapse rule the answer or the reasoning of a reply trips, if any (for scorers)."""
    return degeneration(content) or degeneration(reasoning)
