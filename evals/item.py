"""The three values every eval family and scorer speaks: an item, a reply, a verdict.

An *item* is one question with everything needed to grade it, built offline with a fixed seed
(or loaded from a file pinned by hash). A *reply* is what the model sent back through the
gateway, with reasoning kept apart from the answer. A *verdict* is a scorer's pure judgement of
one reply to one item; a scorer never does I/O (code execution is the one exception and goes
through `evals.sandbox`, never `exec` in this process).

Verdict outcomes are disjoint so that nothing hides in "wrong":

    correct      the answer is right
    wrong        an answer was given and it is wrong
    unparsed     no answer in the required format could be extracted (counts as not correct)
    truncated    the reply stopped on `length` before an answer (counts as not correct)
    degenerate   repetition / collapse detected (counts as not correct)
    malformed    a structured output (tool call, edit block) that does not parse
    timeout      the model ran out of its time budget (counts as not correct)
    error        infrastructure failure after retries; reported, never silently dropped

The denominator of accuracy is always every item: only `correct` counts as right.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Outcome = Literal[
    "correct", "wrong", "unparsed", "truncated", "degenerate", "malformed", "timeout", "error"
]


@dataclass(frozen=True, slots=True)
class Item:
    """One eval question. `messages` is the chat the model sees; `answer` is what scorers use."""

    id: str
    family: str
    messages: tuple[dict[str, Any], ...]
    answer: Any
    scorer: str
    tools: tuple[dict[str, Any], ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def digest(self) -> str:
        """A stable hash of everything that defines the item (used to pair identical items)."""
        payload = {
            "id": self.id,
            "family": self.family,
            "messages": list(self.messages),
            "answer": self.answer,
            "scorer": self.scorer,
            "tools": list(self.tools) if self.tools else None,
        }
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True)
class Reply:
    """What came back: the answer text, the reasoning kept apart, and how the reply ended."""

    content: str | None
    reasoning: str | None = None
    finish_reason: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None

    def answer_text(self) -> str | None:
        """The answer part of `content`, or None when there is no answer to grade.

        Reasoning is never the answer: text up to the last `</think>` is dropped (Qwen3-style
        templates open the block in the prompt, so only the closing tag appears), and a
        `<think>` left open means the model never answered. `self.reasoning` is not read.
        """
        if self.content is None:
            return None
        text = self.content
        close = text.rfind("</think>")
        if close >= 0:
            text = text[close + len("</think>") :]
        if "<think>" in text:
            return None
        text = text.strip()
        return text or None

    def final_value(self, line: re.Pattern[str]) -> str | None:
        """The `value` group of `line` matched against the answer's last line, or None.

        Families ask for a strict final line (e.g. `ANSWER: 42`); anything else is unparsed."""
        text = self.answer_text()
        if text is None:
            return None
        match = line.match(text.splitlines()[-1].strip())
        if match is None or not match["value"]:
            return None
        return match["value"]


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    detail: str = ""
    extracted: Any = None
    # Per-family sub-scores (e.g. edit format: well_formed / applies / tests_pass;
    # instruction following: strict / loose).
    parts: dict[str, bool] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"


def items_digest(items: list[Item]) -> str:
    """Hash of an item set; two runs are paired only when their item digests agree."""
    h = hashlib.sha256()
    for digest in sorted(item.digest() for item in items):
        h.update(digest.encode())
    return h.hexdigest()
