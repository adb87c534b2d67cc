"""Constructed maths answers, each with the reference's verdict: math-verify's own `parse` and
`verify` on the gold as a person writes it in LaTeX and the value on the ANSWER line, except
where a probe names a rule of `evals/families/math_answer.py` (a deliberate departure, with the
verdict that rule gives) or the suite's answer format (`format`: no ANSWER line, no answer).

`agreement(score)` runs every probe through a scorer (`evals.families.score`: the path the runner
takes, collapse check included) and counts where it agrees with the reference on correct / not
correct."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from math_verify import parse, verify

from evals.item import Item, Reply, Verdict


@dataclass(frozen=True, slots=True)
class Probe:
    gold: Any  # the item's answer as the suite stores it
    gold_latex: str  # the same answer as a person writes it, for math-verify
    scorer: str
    content: str  # the reply
    kind: str  # correct form / near miss / trap
    rule: str | None = None  # the departure the reference verdict comes from (None: math-verify)
    rule_correct: bool = False

    def item(self) -> Item:
        return Item("probe", "math", ({"role": "user", "content": "q"},), self.gold, self.scorer)

    def reference(self) -> bool:
        if self.rule is not None:
            return self.rule_correct
        value = self.content.rsplit("ANSWER:", 1)[1].strip()
        return bool(verify(parse(f"${self.gold_latex}$"), parse(f"${value}$")))


def _answer(value: str) -> str:
    return f"Working it through step by step.\nANSWER: {value}"


INTEGERS = [35, -35, 0, 7, 1000, 999, 2024, 12345678901234567, 10000000000000000, 99999999999999999]


def _integer_probes(n: int) -> list[Probe]:
    correct = [
        str(n),
        f"\\boxed{{{n}}}",
        f"\\text{{{n}}}",
        f"x = {n}",
        f"{n}.0",
        f"\\frac{{{2 * n}}}{{2}}",
        f"{n} \\text{{ ways}}",
        f"\\mathbf{{{n}}}",
        f"({n})",
        f"\\({n}\\)",
    ]
    if n > 0:
        correct += [f"0{n}"]
    if abs(n) >= 1000:
        correct += [f"{n:,}"]
    near = [str(n + 1), str(n - 1), str(10 * n + 1), f"{n}.5", f"\\boxed{{{n + 2}}}"]
    if n:
        near += [str(-n), f"\\frac{{1}}{{{n}}}"]
    traps = [f"{n} or {n + 1}", f"{n - 1}, {n}", f"\\{{{n}, {n + 1}\\}}", f"{n} \\pm 1"]
    if abs(n) >= 10:
        digits = str(abs(n))
        traps += [f"{digits[0]} or {digits[1:]}", f"{digits[0]}, {digits[1:]}"]
    kinds = [("correct form", correct), ("near miss", near), ("trap", traps)]
    return [
        Probe(n, str(n), "math_integer", _answer(v), kind) for kind, values in kinds for v in values
    ]


SYMBOLIC: list[tuple[str, str, list[str], list[str]]] = [
    (
        "(3+sqrt(5))/2",
        "\\frac{3+\\sqrt{5}}{2}",
        [
            "\\frac{3+\\sqrt{5}}{2}",
            "\\dfrac{3+\\sqrt5}{2}",
            "\\frac{3}{2}+\\frac{\\sqrt{5}}{2}",
            "(3+\\sqrt{5})/2",
            "\\boxed{\\frac{3+\\sqrt{5}}{2}}",
            "(3+sqrt(5))/2",
            "3/2+\\sqrt{5}/2",
            "\\frac{\\sqrt{5}+3}{2}",
            "\\frac{6+2\\sqrt{5}}{4}",
        ],
        ["(3-\\sqrt{5})/2", "\\frac{3+\\sqrt{5}}{3}", "\\sqrt{5}", "3+\\sqrt{5}", "\\frac{5}{2}"],
    ),
    (
        "sqrt(2)/2",
        "\\frac{\\sqrt{2}}{2}",
        ["\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "1/\\sqrt{2}", "\\sqrt{\\frac{1}{2}}"],
        ["\\sqrt{2}", "\\frac{1}{2}", "2\\sqrt{2}", "\\frac{\\sqrt{3}}{2}"],
    ),
    (
        "2*sqrt(13)",
        "2\\sqrt{13}",
        ["2\\sqrt{13}", "\\sqrt{52}", "2 \\cdot \\sqrt{13}", "\\boxed{2\\sqrt{13}}"],
        ["\\sqrt{26}", "4\\sqrt{13}", "2\\sqrt{14}", "13\\sqrt{2}"],
    ),
    (
        "1/3",
        "\\frac{1}{3}",
        ["\\frac{1}{3}", "1/3", "\\tfrac13", "\\frac{2}{6}"],
        ["\\frac{1}{4}", "3", "\\frac{3}{1}"],
    ),
    (
        "pi/4",
        "\\frac{\\pi}{4}",
        ["\\frac{\\pi}{4}", "\\pi/4", "\\frac{1}{4}\\pi"],
        ["\\frac{\\pi}{2}", "\\pi", "45"],
    ),
]


def _symbolic_probes() -> list[Probe]:
    out: list[Probe] = []
    for gold, latex, correct, near in SYMBOLIC:
        out += [Probe(gold, latex, "math_symbolic", _answer(v), "correct form") for v in correct]
        out += [Probe(gold, latex, "math_symbolic", _answer(v), "near miss") for v in near]
    return out


MULTI: list[tuple[Any, str, str, list[str], list[str]]] = [
    (
        [3, 5],
        "3, 5",
        "math_integer",
        [
            "3, 5",
            "5, 3",
            "3,5",
            "\\{3, 5\\}",
            "x = 3, x = 5",
            "x=3 \\text{ or } x=5",
            "3 \\text{ and } 5",
            "\\boxed{3, 5}",
            "3 or 5",
            "\\boxed{3}, \\boxed{5}",
        ],
        ["3", "5", "35", "3, 5, 7", "3, 6", "\\{3\\}", "8", "15"],
    ),
    (
        "3, 5",
        "3, 5",
        "math_symbolic",
        ["3, 5", "5, 3", "\\{5, 3\\}", "x=5, x=3"],
        ["3", "5", "35", "3, 4"],
    ),
    (
        [-2, 7],
        "-2, 7",
        "math_integer",
        ["-2, 7", "7, -2", "x = -2 \\text{ or } x = 7", "\\{-2, 7\\}"],
        ["2, 7", "-2", "7", "-2, 7, 0", "-27"],
    ),
    (
        [1331, 1728],
        "1331, 1728",
        "math_integer",
        ["1331, 1728", "1728, 1331", "1331 \\text{ and } 1728"],
        ["1728", "1331", "13311728", "1331, 1729"],
    ),
    (
        ["1+sqrt(2)", "1-sqrt(2)"],
        "1+\\sqrt{2}, 1-\\sqrt{2}",
        "math_symbolic",
        ["1+\\sqrt{2}, 1-\\sqrt{2}", "1-\\sqrt{2}, 1+\\sqrt{2}", "1 \\pm \\sqrt{2}"],
        ["1+\\sqrt{2}", "1-\\sqrt{2}", "\\sqrt{2}, -\\sqrt{2}"],
    ),
]


def _multi_probes() -> list[Probe]:
    out: list[Probe] = []
    for gold, latex, scorer, correct, near in MULTI:
        out += [Probe(gold, latex, scorer, _answer(v), "correct form") for v in correct]
        out += [Probe(gold, latex, scorer, _answer(v), "near miss") for v in near]
    return out


# Deliberate departures from math-verify, with the verdict the rule gives.
RULES = [
    Probe(-35, "-35", "math_integer", _answer("\u221235"), "correct form", "spelling", True),
    Probe(35, "35", "math_integer", _answer("\u221235"), "near miss", "spelling", False),
    Probe(
        "(3+sqrt(5))/2",
        "\\frac{3+\\sqrt{5}}{2}",
        "math_symbolic",
        _answer("(3 + sqrt(5))/2"),
        "correct form",
        "spelling",
        True,
    ),
    Probe(
        "(3+sqrt(5))/2",
        "\\frac{3+\\sqrt{5}}{2}",
        "math_symbolic",
        _answer("(3 + \u221a5)/2"),
        "correct form",
        "spelling",
        True,
    ),
    Probe(
        "sqrt(5)+3",
        "3+\\sqrt{5}",
        "math_symbolic",
        _answer("3 + sqrt5"),
        "correct form",
        "spelling",
        True,
    ),
    Probe(3, "3", "math_integer", _answer("3 + sqrt(5)"), "trap", "spelling", False),
    Probe(
        "(3+sqrt(5))/2",
        "\\frac{3+\\sqrt{5}}{2}",
        "math_symbolic",
        _answer("1.5 + \\sqrt{5}/2"),
        "trap",
        "exact_form",
        False,
    ),
    Probe("1/2", "\\frac{1}{2}", "math_symbolic", _answer("0.5"), "trap", "exact_form", False),
    Probe(35, "35", "math_integer", _answer("9^{9^{9^{9}}}"), "trap", "guard", False),
    Probe(35, "35", "math_integer", _answer("1000!"), "trap", "guard", False),
    Probe(35, "35", "math_integer", "The answer is 35.", "trap", "format", False),
    Probe(35, "35", "math_integer", "<think>ANSWER: 35", "trap", "format", False),
    Probe(35, "35", "math_integer", "ANSWER: 35\nHope this helps!", "trap", "format", False),
    Probe(35, "35", "math_integer", "\\boxed{35}", "trap", "format", False),
    Probe(
        35,
        "35",
        "math_integer",
        "<think>ANSWER: 34</think>\nANSWER: 35",
        "correct form",
        "format",
        True,
    ),
]


def probes() -> list[Probe]:
    out = [p for n in INTEGERS for p in _integer_probes(n)]
    return out + _symbolic_probes() + _multi_probes() + RULES


def agreement(
    score: Callable[[Item, Reply], Verdict], selection: list[Probe] | None = None
) -> tuple[int, int, list[tuple[Probe, bool, str]]]:
    """(agreeing, total, disagreements as (probe, the scorer's verdict, its detail)). A scorer
    that raises has not called the answer correct."""
    chosen = probes() if selection is None else selection
    agree, misses = 0, []
    for probe in chosen:
        try:
            verdict = score(probe.item(), Reply(probe.content))
            got, detail = verdict.correct, f"{verdict.outcome}: {verdict.detail}"
        except Exception as exc:  # the measurement counts a crash as "not correct"
            got, detail = False, f"raised {type(exc).__name__}: {exc}"
        if got == probe.reference():
            agree += 1
        else:
            misses.append((probe, got, detail))
    return agree, len(chosen), misses
