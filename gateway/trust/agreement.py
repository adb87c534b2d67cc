"""How a shadow's answer agrees with the primary's (pure): the agreement a shadow record keeps.

tools_same / tools_different    both, or either, made tool calls: same names and arguments
                                (arguments compared as parsed JSON; parallel calls in any order)
exact / normalised / different  text answers: identical, identical after folding case,
                                punctuation and whitespace, or neither
verdict_same / verdict_different the mirror was given an eval item id and a scorer
                                (`ShadowMirror`): the two answers' verdicts
primary_failed / shadow_failed  one side has no answer to compare
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.trust.capture import ToolCall

AGREE = ("exact", "normalised", "tools_same", "verdict_same")
DIFFER = ("different", "tools_different", "verdict_different")
_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Answer:
    ok: bool
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    verdict: str | None = None


def normalise(text: str) -> str:
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.casefold())).strip()


def text_agreement(a: str, b: str) -> str:
    if a == b:
        return "exact"
    return "normalised" if normalise(a) == normalise(b) else "different"


def _canonical(call: ToolCall) -> tuple[str, str]:
    try:
        args: Any = json.loads(call.arguments) if call.arguments.strip() else {}
        rendered = json.dumps(args, sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        rendered = "\x00raw:" + call.arguments  # unparsable: only an identical string matches
    return call.name or "", rendered


def tool_agreement(a: Sequence[ToolCall], b: Sequence[ToolCall]) -> str:
    same = sorted(map(_canonical, a)) == sorted(map(_canonical, b))
    return "tools_same" if same else "tools_different"


def agreement(primary: Answer, shadow: Answer) -> str:
    if not primary.ok:
        return "primary_failed"
    if not shadow.ok:
        return "shadow_failed"
    if primary.verdict is not None and shadow.verdict is not None:
        return "verdict_same" if primary.verdict == shadow.verdict else "verdict_different"
    if primary.tool_calls or shadow.tool_calls:
        return tool_agreement(primary.tool_calls, shadow.tool_calls)
    return text_agreement(primary.text, shadow.text)
