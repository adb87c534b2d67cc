"""Contest mathematics: multi-step problems with exact answers, generated from templates.

What it measures: whether a model carries a chain of exact arithmetic and counting to the end
— the family where quantisation damage shows first (reference report 002, "Quality").

Where the items come from: templates in this file, drawn with `random.Random(seed)`. Every item
is solved twice by independent methods (a closed form or library routine against brute force or
enumeration); an item whose two solvers disagree is dropped and another is drawn. Parameter sizes
are chosen to defeat mental arithmetic, and no data is downloaded.

Optional slice (`build(..., reasoning_gym=k)`, default 0): the last k items come from the
`reasoning-gym` package's generators at hard settings (cryptarithm with 3-4 addends, countdown
with 5-6 numbers and targets 500-999, 5x5 zebra puzzles, 4-person knights and knaves), seeded
with the suite seed; each entry is stored whole in the item so it can be re-scored offline.
The package is imported only when the slice is asked for.

Answer format: the last non-empty line of the reply, after any reasoning, must be
`ANSWER: <value>`. Nothing else is parsed — no "last number in the text", no answer taken from
the reasoning, and an unterminated `<think>` block is unanswered (`Reply.answer_text`).

Scorers:
    math_integer   the value must be a plain integer literal ("035" and "-7" are, "35.0",
                   "3,5", "3 or 5" and "1e3" are not); compared as integers.
    math_symbolic  an exact closed form (plain `(3+sqrt(5))/2` or LaTeX `\\frac{3+\\sqrt{5}}{2}`);
                   equal when sympy simplifies the difference to zero. A decimal is never an exact
                   answer; plain text may use only numbers, operators, `sqrt` and `pi`.
    math_reasoning_gym  the ANSWER line's value, graded by reasoning-gym's own scorer for the
                   item's dataset; only a full score (1.0) is correct (countdown's partial credit
                   for a wrong expression is not).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from fractions import Fraction
from math import comb, gcd, isqrt

import sympy
from math_verify import LatexExtractionConfig
from math_verify import parse as latex_parse
from sympy.ntheory.modular import crt
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from evals.item import Item, Reply, Verdict

NAME = "math"
DEFAULT_N = 100

PROMPT = """Solve the following problem. Reason step by step, then finish with one last line of \
the form

ANSWER: {form}

Problem: {question}"""

INTEGER_FORM = "<integer>"
SYMBOLIC_FORM = "<exact value, e.g. (1+sqrt(2))/3; no decimals>"

# The final line; markdown emphasis and inline-math dollars around it are tolerated.
ANSWER_LINE = re.compile(r"^[*_`$\s]*ANSWER[*_`\s]*:[*_`$\s]*(?P<value>.*?)[*_`$\s.]*$")
INTEGER = re.compile(r"^[-\u2212]?\d+$")
DECIMAL = re.compile(r"\d\.\d|\.\d|\d\.(?!\d)")
PLAIN_EXPR = re.compile(r"^(?:\d+|sqrt|pi|[-+*/^()\s\u221a\u2212])+$")
BARE_ROOT = re.compile(r"sqrt\s*(\d+)")
HUGE_POWER = re.compile(r"(\^|\*\*)\s*\(?\s*\d{3,}|(\^|\*\*).*(\^|\*\*)")

Problem = tuple[str, object, object]  # question, answer by solver A, answer by solver B


# ----------------------------------------------------------------------------- templates


def _power_tower(rng: random.Random) -> Problem:
    a, b, c, m = rng.randint(3, 19), rng.randint(3, 9), rng.randint(3, 5), rng.randint(101, 997)
    question = f"Find the remainder when {a}^({b}^{c}) is divided by {m}."
    # B: walk the powers of a mod m until they cycle, then index into the cycle.
    seen: dict[int, int] = {}
    powers: list[int] = []
    x = 1
    while x not in seen:
        seen[x] = len(powers)
        powers.append(x)
        x = x * a % m
    start, length = seen[x], len(powers) - seen[x]
    e = b**c
    brute = powers[e] if e < start else powers[start + (e - start) % length]
    return question, pow(a, e, m), brute


def _crt(rng: random.Random) -> Problem:
    mods = rng.sample([7, 9, 11, 13, 16, 17, 19, 23, 25], 3)
    while any(gcd(p, q) != 1 for p, q in itertools.combinations(mods, 2)):
        mods = rng.sample([7, 9, 11, 13, 16, 17, 19, 23, 25], 3)
    rems = [rng.randrange(1, m) for m in mods]
    parts = ", ".join(
        f"leaves remainder {r} when divided by {m}" for r, m in zip(rems, mods, strict=True)
    )
    question = f"Find the smallest positive integer that {parts}."
    solved = crt(mods, rems)
    closed = int(solved[0]) if solved else None
    if closed == 0:
        closed = mods[0] * mods[1] * mods[2]
    brute = next(
        x for x in itertools.count(1) if all(x % m == r for r, m in zip(rems, mods, strict=True))
    )
    return question, closed, brute


def _lattice_paths(rng: random.Random) -> Problem:
    w, h = rng.randint(6, 10), rng.randint(6, 10)
    cells: set[tuple[int, int]] = set()
    while len(cells) < 3:
        cell = (rng.randint(1, w - 1), rng.randint(1, h - 1))
        cells.add(cell)
    blocked = sorted(cells)
    names = ", ".join(f"({x},{y})" for x, y in blocked)
    question = (
        f"A path goes from (0,0) to ({w},{h}) using unit steps right (+1,0) or up (0,+1). How "
        f"many such paths avoid all of the points {names}? Give the count modulo 1000."
    )

    def paths(p: tuple[int, int], q: tuple[int, int]) -> int:
        dx, dy = q[0] - p[0], q[1] - p[1]
        return comb(dx + dy, dx) if dx >= 0 and dy >= 0 else 0

    # A: inclusion-exclusion over the (ordered) subsets of blocked points.
    total = 0
    for k in range(len(blocked) + 1):
        for subset in itertools.combinations(blocked, k):
            chain = [(0, 0), *subset, (w, h)]
            term = 1
            for p, q in itertools.pairwise(chain):
                term *= paths(p, q)
            total += (-1) ** k * term
    # B: dynamic programming over the grid.
    grid = [[0] * (h + 1) for _ in range(w + 1)]
    for x in range(w + 1):
        for y in range(h + 1):
            if (x, y) in cells:
                continue
            grid[x][y] = (
                1 if x == y == 0 else (grid[x - 1][y] if x else 0) + (grid[x][y - 1] if y else 0)
            )
    return question, total % 1000, grid[w][h] % 1000


def _bounded_solutions(rng: random.Random) -> Problem:
    bounds = [rng.randint(4, 15) for _ in range(4)]
    total = rng.randint(sum(bounds) // 3, 2 * sum(bounds) // 3)
    limits = ", ".join(f"0 <= x{i + 1} <= {u}" for i, u in enumerate(bounds))
    question = f"How many integer solutions does x1 + x2 + x3 + x4 = {total} have with {limits}?"
    # A: inclusion-exclusion on the variables that exceed their bound.
    closed = 0
    for k in range(5):
        for subset in itertools.combinations(bounds, k):
            rest = total - sum(u + 1 for u in subset)
            if rest >= 0:
                closed += (-1) ** k * comb(rest + 3, 3)
    # B: enumeration.
    brute = sum(
        1
        for xs in itertools.product(*(range(u + 1) for u in bounds[:3]))
        if 0 <= total - sum(xs) <= bounds[3]
    )
    return question, closed, brute


def _totient_sum(rng: random.Random) -> Problem:
    lo = rng.randint(100, 900)
    hi = lo + rng.randint(20, 60)
    question = (
        f"Let phi be Euler's totient function. Compute phi({lo}) + phi({lo + 1}) + ... + "
        f"phi({hi}), modulo 1000."
    )
    closed = sum(int(sympy.totient(k)) for k in range(lo, hi + 1)) % 1000
    brute = sum(sum(1 for j in range(1, k + 1) if gcd(j, k) == 1) for k in range(lo, hi + 1))
    return question, closed, brute % 1000


def _vieta(rng: random.Random) -> Problem:
    roots = [rng.choice([-1, 1]) * rng.randint(2, 12) for _ in range(3)]
    x = sympy.Symbol("x")
    poly = sympy.Poly(sympy.expand((x - roots[0]) * (x - roots[1]) * (x - roots[2])), x)
    _, p, q, r = (int(c) for c in poly.all_coeffs())
    question = (
        f"The cubic x^3 + ({p})x^2 + ({q})x + ({r}) has roots a, b, c. Compute a^3 + b^3 + c^3."
    )
    # A: Newton's identities from the coefficients alone.
    e1, e2, e3 = -p, q, -r
    closed = e1**3 - 3 * e1 * e2 + 3 * e3
    # B: find the integer roots by search and cube them.
    found = [k for k in range(-20, 21) for _ in range(_multiplicity(p, q, r, k))]
    brute = sum(k**3 for k in found) if len(found) == 3 else None
    return question, closed, brute


def _multiplicity(p: int, q: int, r: int, k: int) -> int:
    coeffs, m = [1, p, q, r], 0
    while len(coeffs) > 1:
        quotient, acc = [], 0
        for c in coeffs:
            acc = acc * k + c
            quotient.append(acc)
        if quotient.pop() != 0:
            break
        coeffs, m = quotient, m + 1
    return m


def _recurrence(rng: random.Random) -> Problem:
    c1, c2, a0, a1 = (rng.randint(2, 9) for _ in range(4))
    n, m = rng.randint(2000, 9000), rng.randint(500, 1000)
    question = (
        f"A sequence has a_0 = {a0}, a_1 = {a1} and a_n = {c1}a_(n-1) + {c2}a_(n-2) for n >= 2. "
        f"Find the remainder when a_{n} is divided by {m}."
    )
    # A: matrix power mod m.
    matrix = sympy.Matrix([[c1, c2], [1, 0]])
    power = _matpow_mod(matrix, n - 1, m)
    closed = int((power[0, 0] * a1 + power[0, 1] * a0) % m)
    # B: iterate.
    prev, cur = a0, a1
    for _ in range(n - 1):
        prev, cur = cur, (c1 * cur + c2 * prev) % m
    return question, closed, cur


def _matpow_mod(matrix: sympy.Matrix, e: int, m: int) -> sympy.Matrix:
    result = sympy.eye(2)
    while e:
        if e & 1:
            result = (result * matrix).applyfunc(lambda v: v % m)
        matrix = (matrix * matrix).applyfunc(lambda v: v % m)
        e >>= 1
    return result


def _interior_points(rng: random.Random) -> Problem:
    pts = [(rng.randint(-30, 30), rng.randint(-30, 30)) for _ in range(6)]
    shape = sympy.convex_hull(*pts)
    if not isinstance(shape, sympy.Polygon) or len(shape.vertices) < 4:
        return "", 0, None
    hull = [(int(p.x), int(p.y)) for p in shape.vertices]
    names = ", ".join(f"({x},{y})" for x, y in hull)
    question = (
        f"How many points with integer coordinates lie strictly inside the polygon with "
        f"vertices {names} (in this order)?"
    )
    # A: Pick's theorem with the shoelace area and gcd boundary count.
    twice_area = abs(sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in _edges(hull)))
    boundary = sum(gcd(abs(x2 - x1), abs(y2 - y1)) for (x1, y1), (x2, y2) in _edges(hull))
    closed = (twice_area - boundary + 2) // 2
    # B: a lattice point is inside a convex polygon when it is strictly on one side of every edge.
    xs, ys = [p[0] for p in hull], [p[1] for p in hull]
    brute = 0
    for x in range(min(xs), max(xs) + 1):
        for y in range(min(ys), max(ys) + 1):
            sides = {
                (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) > 0
                if (x2 - x1) * (y - y1) != (y2 - y1) * (x - x1)
                else None
                for (x1, y1), (x2, y2) in _edges(hull)
            }
            brute += sides in ({True}, {False})
    return question, closed, brute


def _edges(poly: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    return list(zip(poly, poly[1:] + poly[:1], strict=True))


def _dice_probability(rng: random.Random) -> Problem:
    k = rng.randint(3, 5)
    target = rng.randint(k + 2, 6 * k - 2)
    question = (
        f"{k} fair six-sided dice are rolled. The probability that their sum is {target} is p/q "
        f"in lowest terms. Find p + q."
    )
    # A: the generating function's coefficient.
    x = sympy.Symbol("x")
    coeff = sympy.Poly(sum(x**i for i in range(1, 7)) ** k, x).coeff_monomial(x**target)
    closed_p = Fraction(int(coeff), 6**k)
    # B: enumeration.
    hits = sum(1 for roll in itertools.product(range(1, 7), repeat=k) if sum(roll) == target)
    brute_p = Fraction(hits, 6**k)
    closed, brute = (
        closed_p.numerator + closed_p.denominator,
        brute_p.numerator + brute_p.denominator,
    )
    return question, closed, brute


def _quadratic_root(rng: random.Random) -> Problem:
    b, c = rng.randint(3, 25), rng.randint(-40, 20)
    disc = b * b - 4 * c
    if disc <= 0 or isqrt(disc) ** 2 == disc:
        return "", 0, None
    question = f"Find the exact value of the larger root of x^2 - {b}x + ({c}) = 0."
    x = sympy.Symbol("x")
    solved = max(sympy.solve(x**2 - b * x + c, x), key=lambda v: float(v))
    formula = (b + sympy.sqrt(disc)) / 2
    return question, str(sympy.nsimplify(solved)), str(formula)


def _distance(rng: random.Random) -> Problem:
    p = (rng.randint(-20, 20), rng.randint(-20, 20))
    q = (rng.randint(-20, 20), rng.randint(-20, 20))
    sq = (p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2
    if sq == 0 or isqrt(sq) ** 2 == sq:
        return "", 0, None
    question = f"Find the exact distance between the points {p} and {q}, in simplest radical form."
    # B: pull out the largest square factor by search.
    k = max(d for d in range(1, isqrt(sq) + 1) if sq % (d * d) == 0)
    return question, str(sympy.sqrt(sq)), str(k * sympy.sqrt(sq // (k * k)))


# name -> (generator, scorer)
TEMPLATES: dict[str, tuple[Callable[[random.Random], Problem], str]] = {
    "power_tower": (_power_tower, "math_integer"),
    "crt": (_crt, "math_integer"),
    "lattice_paths": (_lattice_paths, "math_integer"),
    "bounded_solutions": (_bounded_solutions, "math_integer"),
    "totient_sum": (_totient_sum, "math_integer"),
    "vieta": (_vieta, "math_integer"),
    "recurrence": (_recurrence, "math_integer"),
    "interior_points": (_interior_points, "math_integer"),
    "dice_probability": (_dice_probability, "math_integer"),
    "quadratic_root": (_quadratic_root, "math_symbolic"),
    "distance": (_distance, "math_symbolic"),
}


# reasoning-gym dataset -> hard configuration
REASONING_GYM: dict[str, dict[str, int]] = {
    "cryptarithm": {"min_words": 3, "max_words": 4},
    "countdown": {"min_numbers": 5, "max_numbers": 6, "min_target": 500, "max_target": 999},
    "zebra_puzzles": {"num_people": 5, "num_characteristics": 5},
    "knights_knaves": {"n_people": 4},
}
GYM_PROMPT = """{question}

Reason step by step, then finish with one last line of the form

ANSWER: <your final answer, in the format asked for above, on this one line>"""


def _gym_items(seed: int, k: int, start: int) -> list[Item]:
    import reasoning_gym  # heavy (several seconds); only when the slice is asked for

    names = list(REASONING_GYM)
    per = {name: k // len(names) + (i < k % len(names)) for i, name in enumerate(names)}
    items: list[Item] = []
    for name in names:
        if not per[name]:
            continue
        dataset = reasoning_gym.create_dataset(
            name, size=per[name], seed=seed, **REASONING_GYM[name]
        )
        for entry in dataset:
            items.append(
                Item(
                    id=f"math-{start + len(items):03d}-rg-{name}",
                    family=NAME,
                    messages=(
                        {"role": "user", "content": GYM_PROMPT.format(question=entry["question"])},
                    ),
                    answer={"dataset": name, "entry": entry},
                    scorer="math_reasoning_gym",
                    meta={"template": f"reasoning_gym:{name}", "seed": seed},
                )
            )
    return items


def _agree(scorer: str, a: object, b: object) -> bool:
    if a is None or b is None:
        return False
    if scorer == "math_symbolic":
        return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
    return a == b


def build(seed: int = 0, n: int = DEFAULT_N, *, reasoning_gym: int = 0, **_: object) -> list[Item]:
    """`n` items: templates in turn, each drawn until its two solvers agree; the last
    `reasoning_gym` of them from reasoning-gym's generators instead."""
    rng = random.Random(f"math:{seed}")
    names = list(TEMPLATES)
    items = []
    for i in range(n - reasoning_gym):
        name = names[i % len(names)]
        generate, scorer = TEMPLATES[name]
        question, a, b = generate(rng)
        while not question or not _agree(scorer, a, b):
            question, a, b = generate(rng)
        form = SYMBOLIC_FORM if scorer == "math_symbolic" else INTEGER_FORM
        items.append(
            Item(
                id=f"math-{i:03d}-{name}",
                family=NAME,
                messages=(
                    {"role": "user", "content": PROMPT.format(form=form, question=question)},
                ),
                answer=a,
                scorer=scorer,
                meta={"template": name, "seed": seed},
            )
        )
    if reasoning_gym:
        items += _gym_items(seed, reasoning_gym, start=len(items))
    return items


# ----------------------------------------------------------------------------- scoring


def final_answer(reply: Reply) -> str | None:
    """The value on the reply's last non-empty line if that line is `ANSWER: ...`, else None."""
    return reply.final_value(ANSWER_LINE)


def score_integer(item: Item, reply: Reply) -> Verdict:
    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    if not INTEGER.match(value):
        return Verdict("unparsed", f"not an integer literal: {value!r}", value)
    got = int(value.replace("\u2212", "-"))
    return Verdict("correct" if got == int(item.answer) else "wrong", "", got)


def score_symbolic(item: Item, reply: Reply) -> Verdict:
    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    if DECIMAL.search(value):
        return Verdict("wrong", "a decimal is not an exact answer", value)
    expr = _parse_exact(value)
    if expr is None:
        return Verdict("unparsed", f"not an exact expression: {value!r}", value)
    if expr.atoms(sympy.Float):
        return Verdict("wrong", "a decimal is not an exact answer", value)
    equal = sympy.simplify(sympy.sympify(item.answer) - expr) == 0
    return Verdict("correct" if equal else "wrong", "", str(expr))


def _parse_exact(value: str) -> sympy.Expr | None:
    """LaTeX through math-verify; plain text through sympy, but only from a safe alphabet."""
    if "\\" in value:
        parsed = latex_parse(f"${value}$", extraction_config=[LatexExtractionConfig()])
        expr = parsed[0] if parsed else None
        return expr if isinstance(expr, sympy.Expr) else None
    if len(value) > 80 or not PLAIN_EXPR.match(value) or HUGE_POWER.search(value):
        return None
    text = value.replace("\u2212", "-").replace("\u221a", "sqrt")
    text = BARE_ROOT.sub(r"sqrt(\1)", text)  # "sqrt5", "sqrt 5" -> sqrt(5)
    transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
    try:
        expr = parse_expr(text, transformations=transformations)
    except (SyntaxError, TypeError, ValueError, sympy.SympifyError):
        return None
    return expr if isinstance(expr, sympy.Expr) else None


def score_reasoning_gym(item: Item, reply: Reply) -> Verdict:
    import reasoning_gym

    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    grade = reasoning_gym.get_score_answer_fn(item.answer["dataset"])
    try:
        score = grade(value, item.answer["entry"])
    except Exception as exc:  # a grader that chokes on an answer has not accepted it
        return Verdict("wrong", f"reasoning-gym grader raised {type(exc).__name__}", value)
    return Verdict("correct" if score == 1.0 else "wrong", f"reasoning-gym score {score}", value)


SCORERS = {
    "math_integer": score_integer,
    "math_symbolic": score_symbolic,
    "math_reasoning_gym": score_reasoning_gym,
}
