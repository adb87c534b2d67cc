"""The math family's templates: each draws one problem and solves it twice, by independent
methods (a closed form or library routine against brute force or enumeration), so that
`evals.families.math.build` keeps only problems whose two answers agree. `TEMPLATES` names each
generator with the scorer its answer needs."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from fractions import Fraction
from math import comb, gcd, isqrt

import sympy
from sympy.ntheory.modular import crt

Problem = tuple[str, object, object]  # question, answer by solver A, answer by solver B


def power_tower(rng: random.Random) -> Problem:
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


def chinese_remainder(rng: random.Random) -> Problem:
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


def lattice_paths(rng: random.Random) -> Problem:
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


def bounded_solutions(rng: random.Random) -> Problem:
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


def totient_sum(rng: random.Random) -> Problem:
    lo = rng.randint(100, 900)
    hi = lo + rng.randint(20, 60)
    question = (
        f"Let phi be Euler's totient function. Compute phi({lo}) + phi({lo + 1}) + ... + "
        f"phi({hi}), modulo 1000."
    )
    closed = sum(int(sympy.totient(k)) for k in range(lo, hi + 1)) % 1000
    brute = sum(sum(1 for j in range(1, k + 1) if gcd(j, k) == 1) for k in range(lo, hi + 1))
    return question, closed, brute % 1000


def vieta(rng: random.Random) -> Problem:
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


def recurrence(rng: random.Random) -> Problem:
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


def interior_points(rng: random.Random) -> Problem:
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


def dice_probability(rng: random.Random) -> Problem:
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


def quadratic_root(rng: random.Random) -> Problem:
    b, c = rng.randint(3, 25), rng.randint(-40, 20)
    disc = b * b - 4 * c
    if disc <= 0 or isqrt(disc) ** 2 == disc:
        return "", 0, None
    question = f"Find the exact value of the larger root of x^2 - {b}x + ({c}) = 0."
    x = sympy.Symbol("x")
    solved = max(sympy.solve(x**2 - b * x + c, x), key=lambda v: float(v))
    formula = (b + sympy.sqrt(disc)) / 2
    return question, str(sympy.nsimplify(solved)), str(formula)


def distance(rng: random.Random) -> Problem:
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
    "power_tower": (power_tower, "math_integer"),
    "crt": (chinese_remainder, "math_integer"),
    "lattice_paths": (lattice_paths, "math_integer"),
    "bounded_solutions": (bounded_solutions, "math_integer"),
    "totient_sum": (totient_sum, "math_integer"),
    "vieta": (vieta, "math_integer"),
    "recurrence": (recurrence, "math_integer"),
    "interior_points": (interior_points, "math_integer"),
    "dice_probability": (dice_probability, "math_integer"),
    "quadratic_root": (quadratic_root, "math_symbolic"),
    "distance": (distance, "math_symbolic"),
}
