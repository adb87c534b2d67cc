"""The corruption tripwire: 20 fixed prompts, a repetition detector and expected substrings.

Run on every configuration before anything else is measured. Each prompt goes through the
model's own chat template (the chat endpoint) and gets one of three verdicts:

    degenerate   the reply (answer or reasoning) trips the repetition detector, or is empty
                 and stopped on length
    wrong        no expected substring in the answer
    ok           an expected substring is there

The detector (`degeneration`) looks for collapse, not for bad answers; its rules are in
`gateway/trust/degeneration.py` (the watchdog reads it on live answers too).

A configuration is `degenerate` when more than `max_degenerate` prompts are, else `wrong` when
more than `max_wrong` are, else `ok`. The defaults (1 and 2) are for capable models; a very
small model answers many prompts wrongly while healthy, so judge it against its own reference
configuration rather than the defaults — the tripwire's job is the degenerate count.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.trust.degeneration import degeneration

Verdict = Literal["ok", "degenerate", "wrong"]


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
