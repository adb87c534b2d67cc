"""Reading and judging a maths answer with `math-verify` (Hugging Face's maths grader).

The value on the reply's `ANSWER:` line is read by math-verify's own parser as a LaTeX formula
(`$value$`), falling back to its plain-expression reader, so the forms it knows all count:
`\\boxed{36}`, `$36$`, `\\frac{3+\\sqrt{5}}{2}`, `(3+sqrt(5))/2`, `1,000`, `x = 35`,
`\\text{35}`, and a multi-answer set (`3, 5`, `\\{5, 3\\}`, `x=3 \\text{ or } x=5`). The gold
is the item's answer as sympy sees it: an int, a sympy string (`"(3+sqrt(5))/2"`, `"3, 5"`)
or a list of them (every answer of a multi-answer item). A multi-answer gold is one set: the
answer must be the same set — one of the values, or a superset, is wrong. A single gold read
against a set is wrong too, which keeps the "3 or 5" != 35 trap (math-verify reads "3 or 5" as
the set {3, 5}).

An answer math-verify does not accept is `wrong`, or `unparsed` when it is no value at all:
nothing read, or only unknowns where the gold has none ("two" reads as t*w*o, "x + 1").

Where this grader departs from math-verify, on purpose, each departure is a rule with its own
name in the verdict's `parts`, which the report shows as sub-scores (`math_verify` always holds
math-verify's own verdict, so its rate is the accuracy math-verify alone would report):

    exact_form     on items that ask for an exact value (False when the answer has a decimal):
                   a decimal is wrong ("2.618", "1.5 + sqrt(5)/2"), which math-verify accepts
                   when it is numerically close
    spelling       True when the rule rewrote the answer: a Unicode minus (U+2212) is "-", and a
                   plain-text root (`sqrt(5)`, `sqrt5`, `√5`) is written `\\sqrt{5}` before
                   math-verify reads it. math-verify finds nothing in "−35", reads "sqrt5" as the
                   product s*q*r*t*5, and "3 + sqrt(5)" as 3 (its own rewrite of sqrt after a
                   space escapes the backslash twice)
    guard          more than MAX_CHARS characters, a power tower or an exponent or factorial of
                   three digits or more is not read at all (unparsed): math-verify's own timeout
                   uses SIGALRM, which does not work in the runner's scoring threads, so it is
                   switched off and the cost is bounded here instead
"""

from __future__ import annotations

import re
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from evals.item import Verdict

MAX_CHARS = 200
DECIMAL = re.compile(r"\d\.\d|\.\d|\d\.(?!\d)")
HUGE = re.compile(r"(\^|\*\*)\s*[({]?\s*\d{3,}|(\^|\*\*).*(\^|\*\*)|\d{3,}\s*!")
BARE_ROOT = re.compile(r"(?<!\\)(?:sqrt|\u221a)\s*(\d+)")
CALLED_ROOT = re.compile(r"(?<!\\)(?:sqrt|\u221a)\s*\(([^()]*)\)")
CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())


def gold_value(answer: Any) -> sympy.Basic:
    """The item's answer as one sympy value; a list (or a sympy "3, 5") is a set."""
    if isinstance(answer, list | tuple):
        return sympy.FiniteSet(*(gold_value(a) for a in answer))
    value = sympy.sympify(answer)
    if isinstance(value, tuple):
        return sympy.FiniteSet(*value)
    return value


def is_multi(answer: Any) -> bool:
    return isinstance(gold_value(answer), sympy.FiniteSet)


def _normalise(value: str) -> tuple[str, bool]:
    """The value with Unicode minus signs and plain-text roots (`sqrt(5)`, `sqrt5`, `√5`) in
    LaTeX (`\\sqrt{5}`); True when anything was rewritten."""
    text = value.replace("\u2212", "-")
    while (spelt := CALLED_ROOT.sub(r"\\sqrt{\1}", text)) != text:
        text = spelt  # inner roots first: sqrt(2 + sqrt(3))
    text = BARE_ROOT.sub(r"\\sqrt{\1}", text)
    return text, text != value


def read(value: str) -> tuple[list[Any], str | None]:
    """math-verify's reading of the value (empty when nothing was read) and why, if refused."""
    if len(value) > MAX_CHARS:
        return [], f"longer than {MAX_CHARS} characters"
    if HUGE.search(value):
        return [], "a power tower, or an exponent or factorial too large to evaluate"
    text = value if "\\(" in value or "\\[" in value else f"${value}$"
    parsed = parse(text, extraction_config=list(CONFIG), parsing_timeout=None)
    values = [p for p in parsed if not isinstance(p, str)]
    return (parsed if values else []), None


def judge(answer: Any, value: str, *, exact: bool) -> Verdict:
    """The verdict on one ANSWER-line value against the item's gold `answer`."""
    text, respelt = _normalise(value)
    parsed, refused = read(text)
    if not parsed:
        return Verdict("unparsed", refused or f"math-verify read nothing in {value!r}", value)
    gold = gold_value(answer)
    agrees = bool(verify([gold], parsed, timeout_seconds=None))
    if not agrees and _unknowns(parsed[0]) and not _unknowns(gold):
        names = ", ".join(sorted(str(u) for u in _unknowns(parsed[0])))
        why = f"not a value: {value!r} (reads as unknowns {names})"
        return Verdict("unparsed", why, value, {"math_verify": False})
    parts = {"math_verify": agrees}
    if respelt:
        parts["spelling"] = True
    extracted = str(parsed[0])
    if exact:
        parts["exact_form"] = DECIMAL.search(text) is None
        if not parts["exact_form"]:
            return Verdict("wrong", "a decimal is not an exact answer", extracted, parts)
    if agrees:
        return Verdict("correct", "", extracted, parts)
    return Verdict("wrong", _why_wrong(gold, parsed[0]), extracted, parts)


def _unknowns(value: Any) -> set[sympy.Symbol]:
    """The unknowns in a value ("two" reads as t*w*o); `x = 35` and `{x = 3, x = 5}` name the
    variable they solve for, which does not count."""
    if isinstance(value, sympy.Eq):
        value = value.rhs
    if isinstance(value, sympy.FiniteSet):
        return set().union(*(_unknowns(v) for v in value))
    return set(getattr(value, "free_symbols", ()))


def _why_wrong(gold: sympy.Basic, got: Any) -> str:
    gold_set, got_set = isinstance(gold, sympy.FiniteSet), isinstance(got, sympy.FiniteSet)
    if gold_set and not got_set:
        return f"one value; the answer is the set of {len(gold)}"
    if got_set and not gold_set:
        return f"a set of {len(got)} values; the answer is one value"
    return ""
