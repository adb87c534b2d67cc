"""Task shape: a pure classifier of a request, for routing by what the request asks.

A request with tools, a long-context request and a maths request want different models. `classify`
reads only the request body (after its door) and a few numbers and names one of a bounded set of
shapes, checked in this order (the first that holds wins):

    tools         `tools` given (non-empty), or a `tool_choice` other than "none"
    long_context  the likeliest-most prompt estimate (gateway/serving/adapt.py's `prompt_bounds`)
                  reaches the route's `long_context_tokens`, or is over the smallest known window
                  of the route's own upstreams
    edit          the instructions ask for SEARCH/REPLACE edit blocks (`<<<<<<< SEARCH`, the
                  aider format the editformat eval family scores)
    structured    `response_format` json_object / json_schema, or guided decoding fields
    reasoning     `reasoning_effort` (or a Responses-style `reasoning.effort`) above minimal, a
                  thinking budget, or `chat_template_kwargs.enable_thinking` true
    math          the last user message (or the prompt) is a maths problem (`is_math`): maths
                  notation (an equation or arithmetic between numbers, x^2, LaTeX, ∑ ∫ √ ≤ …),
                  a strong maths word ("prove", "theorem", "integral", "equation"…), or a maths
                  verb ("compute", "solve", "calculate"…) beside a number; never a message with
                  a code block (that is code to write, not a problem to solve)
    default       anything else (and every /embeddings and /completions request without tools)

The shape goes on the record (`record.shape`) and is a metric label, so the set stays bounded:
`SHAPES`. What a shape routes to is the route's `[models.NAME.shapes]` (gateway/config/routes.py);
which upstream of it the quality gate puts first is decided per shape (gateway/trust/gate.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gateway.config.routes import SHAPES as SHAPES
from gateway.serving.adapt import prompt_bounds

EDIT_MARK = "<<<<<<< SEARCH"
STRUCTURED_FORMATS = frozenset({"json_object", "json_schema"})
GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")
QUIET_EFFORT = frozenset({"none", "minimal"})
# Maths notation, read around each operator the text has (12 + 30, 3x = 7, x^2, 2**10, 5 - 3;
# a bare minus or slash is no operator: 2024-12-04 is a date and 1/2 a cup), LaTeX maths, and
# the symbols only maths uses. Matched on the lower-cased text.
OPERATORS = ("+", "*", "^", "=", "<", ">", "×", "÷", " - ", " / ")
NOTATION = re.compile(
    r"\d\s*(?:[+*×÷^=<>]|\s[-/]\s)\s*[-(]?\d"
    r"|(?<![a-z0-9_])[a-z]\s*(?:\^|\*\*|[=<>])\s*-?\d"
    r"|\d[a-z]\s*[-+=]\s*\d"
)
SYMBOLS = ("∑", "∫", "√", "π", "∞", "≤", "≥", "≠", "±", "∂", "∏")
LATEX = re.compile(r"\\(?:frac|sqrt|int|sum|prod|lim|binom|cdot|times|leq|geq|pi)\b")
# Words only maths problems use, alone or leading a phrase (`STRONG` checks the phrase). The
# words are looked up in the set of the text's words first: a regex over the whole text costs
# far more, and this runs on every request.
STRONG_WORDS = frozenset(
    [
        "prove",
        "proof",
        "theorem",
        "lemma",
        "equation",
        "equations",
        "integral",
        "integrate",
        "derivative",
        "differentiate",
        "polynomial",
        "factorise",
        "factorize",
        "simplify",
        "quadratic",
        "modulo",
    ]
)
STRONG_LEADS = frozenset(
    ["remainder", "divisible", "greatest", "least", "probability", "arithmetic"]
)
STRONG = re.compile(
    r"\b(?:remainder when|divisible by|greatest common divisor|least common multiple|"
    r"probability that|arithmetic mean)\b"
)
# Verbs and questions that make a problem of a number beside them.
ASK_LEADS = frozenset(["compute", "calculate", "solve", "evaluate", "how", "what", "find"])
ASKING = re.compile(
    r"\b(?:compute|calculate|solve|evaluate|how many|how much|what is the (?:value|sum|"
    r"product|area|volume|number)|find the (?:value|sum|number|smallest|largest|area))\b"
)
LEADS = STRONG_WORDS | STRONG_LEADS | ASK_LEADS
PUNCTUATION = str.maketrans({c: " " for c in ".,;:!?()[]{}\"'`*/\\"})
DIGITS = "0123456789"
CODE_BLOCK = "```"
MATH_CHARS = 16_384  # of a message read for maths: a long one is long_context's to judge


def classify(
    body: dict[str, Any],
    *,
    door: str = "chat",
    long_context_tokens: int | None = None,
    smallest_window: int | None = None,
    estimate: tuple[int, int] | None = None,
) -> str:
    """The shape of one request. `estimate`: `prompt_bounds(body)` when the caller has it."""
    if _tools(body):
        return "tools"
    if door == "embeddings":
        return "default"
    high = (estimate or prompt_bounds(body))[1]
    if (long_context_tokens is not None and high >= long_context_tokens) or (
        smallest_window is not None and high > smallest_window
    ):
        return "long_context"
    return _asked(body)


def _asked(body: dict[str, Any]) -> str:
    """The shape of what the body asks for, after tools and length (checked in order)."""
    if _asks_edit_blocks(body):
        return "edit"
    if _structured(body):
        return "structured"
    if _reasoning(body):
        return "reasoning"
    if is_math(_question(body)):
        return "math"
    return "default"


def _tools(body: dict[str, Any]) -> bool:
    if body.get("tools"):
        return True
    choice = body.get("tool_choice")
    return choice is not None and choice != "none"


def _structured(body: dict[str, Any]) -> bool:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in STRUCTURED_FORMATS:
        return True
    return any(body.get(name) is not None for name in GUIDED)


def _reasoning(body: dict[str, Any]) -> bool:
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if effort is None and isinstance(reasoning, dict):
        effort = reasoning.get("effort")
    if isinstance(effort, str) and effort not in QUIET_EFFORT:
        return True
    if body.get("thinking_token_budget"):
        return True
    kwargs = body.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True


def is_math(text: str) -> bool:
    """Whether `text` reads as a maths problem (pure; see the module's table). Built to cost
    microseconds on ordinary prose: substring tests first, a regex only around what they find."""
    text = text[:MATH_CHARS]
    if not text or CODE_BLOCK in text:
        return False
    lower = text.lower()
    if any(c in lower for c in SYMBOLS) or ("\\" in lower and LATEX.search(lower)):
        return True
    digits = any(d in lower for d in DIGITS)
    if digits and _notation(lower):
        return True
    found = LEADS.intersection(lower.translate(PUNCTUATION).split())
    if found & STRONG_WORDS or (found & STRONG_LEADS and STRONG.search(lower)):
        return True
    return digits and bool(found & ASK_LEADS) and ASKING.search(lower) is not None


def _notation(lower: str) -> bool:
    """An operator of `OPERATORS` with maths on both sides (`NOTATION`, read around it)."""
    for op in OPERATORS:
        at = lower.find(op)
        while at != -1:
            if NOTATION.search(lower, max(0, at - 12), at + len(op) + 12):
                return True
            at = lower.find(op, at + 1)
    return False


def _question(body: dict[str, Any]) -> str:
    """The text of the last user message (a /completions prompt: the prompt)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return "\n".join(_texts(message.get("content")))
    return ""


def _asks_edit_blocks(body: dict[str, Any]) -> bool:
    """The system / developer messages or the last user message name the edit-block marker."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        prompt = body.get("prompt")
        return isinstance(prompt, str) and EDIT_MARK in prompt
    return any(EDIT_MARK in text for text in _instructions(messages))


def _instructions(messages: list[Any]) -> Iterable[str]:
    last_user = None
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") in ("system", "developer"):
            yield from _texts(message.get("content"))
        elif message.get("role") == "user":
            last_user = message
    if last_user is not None:
        yield from _texts(last_user.get("content"))


def _texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
