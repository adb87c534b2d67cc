"""Statistics over scored items: intervals, rates, paired comparison and the noise floor.

Everything here is pure and takes `ItemResult`s.

- `wilson` — the Wilson score interval (95% by default) for k successes in n trials.
- `summarise` / `by_family` — accuracy over *all* items (only `correct` counts as right; the
  denominator never drops an item), its Wilson interval, the rate of every non-correct
  outcome, the `finish_reason == "length"` rate and the mean output tokens.
- `pair` — two arms compared on the items both scored, matched by `item_digest`. Items an arm
  lost to infrastructure (`error`) are excluded from the pair and counted. b = only A right,
  c = only B right; the exact McNemar test is the two-sided binomial test of b against
  b + c at p = 0.5 (`scipy.stats.binomtest`), p = 1 when b + c = 0; the mid-p value is given
  too because the exact test is conservative. Arms whose effective sampling-parameter hashes
  differ are refused (`ParamsMismatch`), and an arm holding one item twice is refused
  (`DuplicateItems`): repeats are never pooled as independent pairs.
- `NoiseFloor` — from one or more same-configuration-twice control pairs: the largest
  aggregate gap and the discordant split. `against_floor` says whether a comparison exceeds
  it: the McNemar test must reject at `alpha`, *and* the aggregate gap must exceed the
  control's, *and* the discordant imbalance |b - c| must exceed the control's imbalance
  scaled to the comparison's item count. All three, because the report's own controls show
  splits as lopsided as 11 to 20 between identical runs.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scipy.stats import binom, binomtest

from evals.item import Outcome
from evals.result import ItemResult

Z95 = 1.959963984540054
NOT_CORRECT: tuple[Outcome, ...] = (
    "wrong",
    "unparsed",
    "truncated",
    "degenerate",
    "malformed",
    "timeout",
    "error",
)


class PairingError(ValueError):
    """Two arms cannot be compared item by item."""


class ParamsMismatch(PairingError):
    """The arms were served with different effective sampling parameters."""


class DuplicateItems(PairingError):
    """An arm holds the same item more than once (repeats must not be pooled as pairs)."""


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    correct: int
    accuracy: float
    ci: tuple[float, float]
    rates: dict[str, float]
    length_stop_rate: float
    mean_output_tokens: float | None
    reasoning_leak_rate: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        return {k: round(v * self.n) for k, v in self.rates.items()}


def summarise(results: Sequence[ItemResult]) -> Summary:
    """Accuracy, interval and outcome rates over every result given."""
    n = len(results)
    outcomes = Counter(r.outcome for r in results)
    k = outcomes["correct"]
    rates: dict[str, float] = {o: (outcomes[o] / n if n else 0.0) for o in NOT_CORRECT}
    length = sum(1 for r in results if r.finish_reason == "length")
    tokens = [r.output_tokens for r in results if r.output_tokens is not None]
    return Summary(
        n=n,
        correct=k,
        accuracy=k / n if n else 0.0,
        ci=wilson(k, n),
        rates=rates,
        length_stop_rate=length / n if n else 0.0,
        mean_output_tokens=sum(tokens) / len(tokens) if tokens else None,
        reasoning_leak_rate=sum(r.reasoning_leak for r in results) / n if n else 0.0,
    )


def by_family(results: Sequence[ItemResult]) -> dict[str, Summary]:
    """One summary per family (sorted by name) plus "overall" last."""
    groups: dict[str, list[ItemResult]] = defaultdict(list)
    for r in results:
        groups[r.family].append(r)
    out = {family: summarise(groups[family]) for family in sorted(groups)}
    out["overall"] = summarise(results)
    return out


@dataclass(frozen=True, slots=True)
class Paired:
    """Arms A and B on the items both scored (neither side an infrastructure error)."""

    a: str
    b: str
    n: int
    a_correct: int
    b_correct: int
    only_a: int  # b in McNemar's notation
    only_b: int  # c
    p_value: float
    mid_p: float
    only_in_a: int = 0
    only_in_b: int = 0
    errored: int = 0
    one_side_truncated: int = 0
    params_hash: str = ""

    @property
    def a_accuracy(self) -> float:
        return self.a_correct / self.n if self.n else 0.0

    @property
    def b_accuracy(self) -> float:
        return self.b_correct / self.n if self.n else 0.0

    @property
    def gap(self) -> float:
        """B minus A on the common items."""
        return self.b_accuracy - self.a_accuracy

    @property
    def discordant(self) -> int:
        return self.only_a + self.only_b


def _single_hash(label: str, results: Iterable[ItemResult]) -> str:
    """The arm's one sampling-parameter hash. Items never answered (a timeout, an error: no
    hash came back) were sampled by nobody and do not count; an arm with no answer at all has
    the empty hash."""
    hashes = {r.params_hash for r in results if r.params_hash} or {""}
    if len(hashes) != 1:
        raise ParamsMismatch(
            f"arm {label!r} mixes {len(hashes)} sampling-parameter hashes: {sorted(hashes)}"
        )
    return hashes.pop()


def _by_digest(label: str, results: Sequence[ItemResult]) -> dict[str, ItemResult]:
    index: dict[str, ItemResult] = {}
    for r in results:
        if r.item_digest in index:
            raise DuplicateItems(f"arm {label!r} holds item {r.item_id!r} more than once")
        index[r.item_digest] = r
    return index


def mcnemar(only_a: int, only_b: int) -> tuple[float, float]:
    """Exact two-sided McNemar p-value and its mid-p variant; (1, 1) with no discordant pairs."""
    m = only_a + only_b
    if m == 0:
        return 1.0, 1.0
    p = float(binomtest(only_a, m, 0.5, alternative="two-sided").pvalue)
    low = min(only_a, only_b)
    mid = 2 * (float(binom.cdf(low, m, 0.5)) - 0.5 * float(binom.pmf(low, m, 0.5)))
    return p, min(1.0, mid)


def pair(
    a: Sequence[ItemResult], b: Sequence[ItemResult], a_label: str = "A", b_label: str = "B"
) -> Paired:
    """Compare two arms item by item on the items both scored."""
    if not a or not b:
        raise PairingError("both arms need at least one result")
    hash_a, hash_b = _single_hash(a_label, a), _single_hash(b_label, b)
    if hash_a != hash_b:
        from evals.parity import why_unequal

        raise ParamsMismatch(
            f"refusing to pair {a_label!r} and {b_label!r}, not at parity: "
            + why_unequal(b_label, b, a_label, a)
        )
    ia, ib = _by_digest(a_label, a), _by_digest(b_label, b)
    common = sorted(ia.keys() & ib.keys())
    n = a_ok = b_ok = only_a = only_b = errored = one_trunc = 0
    for digest in common:
        ra, rb = ia[digest], ib[digest]
        if ra.outcome == "error" or rb.outcome == "error":
            errored += 1
            continue
        n += 1
        a_ok += ra.correct
        b_ok += rb.correct
        only_a += ra.correct and not rb.correct
        only_b += rb.correct and not ra.correct
        one_trunc += (ra.outcome == "truncated") != (rb.outcome == "truncated")
    p, mid = mcnemar(only_a, only_b)
    return Paired(
        a=a_label,
        b=b_label,
        n=n,
        a_correct=a_ok,
        b_correct=b_ok,
        only_a=only_a,
        only_b=only_b,
        p_value=p,
        mid_p=mid,
        only_in_a=len(ia.keys() - ib.keys()),
        only_in_b=len(ib.keys() - ia.keys()),
        errored=errored,
        one_side_truncated=one_trunc,
        params_hash=hash_a,
    )


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """The run-to-run noise of one configuration, from same-configuration-twice controls."""

    gap: float
    imbalance_rate: float  # |b - c| / n of the most lopsided control
    discordance_rate: float  # (b + c) / n, largest over the controls
    controls: tuple[Paired, ...] = field(default=())

    @classmethod
    def from_controls(cls, controls: Sequence[Paired]) -> NoiseFloor:
        if not controls:
            raise ValueError("a noise floor needs at least one control pair")
        usable = [c for c in controls if c.n]
        if not usable:
            raise ValueError("every control pair is empty")
        return cls(
            gap=max(abs(c.gap) for c in usable),
            imbalance_rate=max(abs(c.only_a - c.only_b) / c.n for c in usable),
            discordance_rate=max(c.discordant / c.n for c in usable),
            controls=tuple(controls),
        )


@dataclass(frozen=True, slots=True)
class FloorVerdict:
    exceeds: bool
    reason: str


def against_floor(paired: Paired, floor: NoiseFloor, alpha: float = 0.05) -> FloorVerdict:
    """Whether a paired difference is larger than the same-configuration noise (see module doc)."""
    if paired.n == 0:
        return FloorVerdict(False, "no common items")
    gap = abs(paired.gap)
    imbalance = abs(paired.only_a - paired.only_b)
    floor_imbalance = floor.imbalance_rate * paired.n
    split = f"{paired.only_a} to {paired.only_b}"
    if paired.p_value >= alpha:
        return FloorVerdict(False, f"paired {split}, McNemar p={paired.p_value:.3g} >= {alpha}")
    if gap <= floor.gap:
        return FloorVerdict(False, f"gap {gap:.3f} within the control's {floor.gap:.3f}")
    if imbalance <= floor_imbalance:
        return FloorVerdict(
            False, f"imbalance {imbalance} within the control's {floor_imbalance:.1f}"
        )
    return FloorVerdict(
        True,
        f"paired {split}, p={paired.p_value:.3g}; gap {gap:.3f} > floor {floor.gap:.3f}",
    )
