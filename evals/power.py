"""How big a gap a paired comparison can tell apart, and how many paired items it needs.

The gate compares two arms on identical items with the exact McNemar test (`evals.stats`): the
b items only A got right against the c items only B got right, a two-sided binomial test of b
against b + c at p = 0.5. Its power depends on three things:

    n   paired items (both arms scored them)
    ψ   the discordance rate: the share of items the two arms answer differently, (b + c) / n
    δ   the gap in accuracy between the arms, (b - c) / n  (|δ| <= ψ: a gap needs discordance)

`power(n, ψ, δ)` is the test's exact power (not a normal approximation): the number of discordant
items m is Binomial(n, ψ); given m, b is Binomial(m, (ψ + δ) / 2ψ); the test rejects when b is
in the exact two-sided rejection region of Binomial(m, 1/2) at `alpha`, so the power is the sum
over m of P(m) times P(b in that region) (`scipy.stats.binom`).

`mde(n, ψ)` — the minimum detectable effect — is the smallest gap δ whose power reaches `power`
(0.8 by default). A gap larger than the observed discordance cannot exist without more
discordance, so δ is judged at ψ' = max(ψ, δ): with 300 items on which two arms almost always
agree, a 5-point gap would need 15 discordant items all one way, and the test sees that. `None`
means no gap at all can be detected: too few items for the test ever to reject (a two-sided exact
test at 0.05 needs 6 discordant items all one way).

`items_needed(ψ, δ)` is the smallest n whose exact power reaches the target, searched from
Connor's (1987) normal-approximation sample size, `connor_n`, the usual closed form:

    n = (z_{1-α/2} √ψ + z_{1-β} √(ψ - δ²))² / δ²
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom, norm

ALPHA = 0.05
POWER = 0.8
MAX_ITEMS = 100_000


def _reject_upto(m: np.ndarray, alpha: float) -> np.ndarray:
    """Per discordant count m, the largest k with 2·P(X <= k) < alpha for X ~ Bin(m, 1/2): the
    test rejects when min(b, m - b) <= k (-1: it never rejects)."""
    k = binom.ppf(alpha / 2, m, 0.5).astype(int)
    # ppf gives the smallest k with cdf >= alpha/2; step back while the cdf is not below it.
    k = np.where(binom.cdf(k, m, 0.5) < alpha / 2, k, k - 1)
    return k


def power(n: int, discordance: float, gap: float, alpha: float = ALPHA) -> float:
    """Exact power of the two-sided exact McNemar test with n paired items, discordance rate
    `discordance` and accuracy gap `gap` (either sign)."""
    gap = abs(gap)
    if n <= 0 or discordance <= 0:
        return 0.0
    if gap > discordance + 1e-12:
        raise ValueError(f"a gap of {gap} needs at least that much discordance, not {discordance}")
    m = np.arange(n + 1)
    k = _reject_upto(m, alpha)
    q = min(1.0, (discordance + gap) / (2 * discordance))
    low = np.where(k >= 0, binom.cdf(k, m, q), 0.0)
    high = np.where(k >= 0, binom.sf(m - k - 1, m, q), 0.0)
    # The two tails overlap only when k >= m/2, which the test at alpha < 1 never reaches.
    reject = np.clip(low + high, 0.0, 1.0)
    return float(np.sum(binom.pmf(m, n, discordance) * reject))


def _power_at(n: int, discordance: float, gap: float, alpha: float) -> float:
    return power(n, max(discordance, gap), gap, alpha)


def mde(n: int, discordance: float, alpha: float = ALPHA, target: float = POWER) -> float | None:
    """The smallest accuracy gap n paired items detect with probability `target`, the gap judged
    at discordance max(`discordance`, gap); None when no gap up to 1 is detectable."""
    if n <= 0 or _power_at(n, discordance, 1.0, alpha) < target:
        return None
    lo = 1e-6
    if _power_at(n, discordance, lo, alpha) >= target:
        return lo
    return float(brentq(lambda d: _power_at(n, discordance, d, alpha) - target, lo, 1.0, xtol=1e-5))


def connor_n(discordance: float, gap: float, alpha: float = ALPHA, target: float = POWER) -> float:
    """Connor's (1987) approximate paired items for McNemar's test (real; round up to use)."""
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(target)
    psi = max(discordance, gap)
    return float((za * math.sqrt(psi) + zb * math.sqrt(psi - gap * gap)) ** 2 / gap**2)


def items_needed(
    discordance: float, gap: float, alpha: float = ALPHA, target: float = POWER
) -> int:
    """The smallest n whose exact power to detect `gap` at `discordance` reaches `target` (and
    stays there for the next items: the exact test's power saw-tooths in n)."""
    if not 0 < gap <= 1:
        raise ValueError(f"the gap to detect must be in (0, 1], not {gap}")
    n = max(6, int(connor_n(discordance, gap, alpha, target) * 0.7))
    while n < MAX_ITEMS:
        if all(_power_at(n + i, discordance, gap, alpha) >= target for i in range(3)):
            return n
        n += max(1, n // 200)
    return MAX_ITEMS


@dataclass(frozen=True, slots=True)
class Resolution:
    """What one paired comparison (or a planned round) can tell apart."""

    n: int
    discordance: float
    mde: float | None
    alpha: float = ALPHA
    power: float = POWER

    @classmethod
    def of(
        cls, n: int, discordance: float, alpha: float = ALPHA, target: float = POWER
    ) -> Resolution:
        return cls(n, discordance, mde(n, discordance, alpha, target), alpha, target)

    def sentence(self) -> str:
        """ "this round can tell apart a 6-point gap (…)", or why it cannot tell any apart."""
        basis = (
            f"{self.n} paired items, {100 * self.discordance:.3g}% discordant; "
            f"α {self.alpha:g}, power {self.power:g}"
        )
        if self.mde is None:
            return f"this round cannot tell any gap apart ({basis})"
        return f"this round can tell apart {gap_phrase(self.mde)} ({basis})"


def points(gap: float) -> str:
    """A gap in accuracy points, as a reader says it: 0.062 -> "6.2-point"."""
    value = gap * 100
    text = f"{value:.0f}" if value >= 10 else f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{text}-point"


def gap_phrase(gap: float) -> str:
    """0.05 -> "a 5-point gap", 0.08 -> "an 8-point gap", 0.112 -> "an 11-point gap"."""
    text = points(gap)
    spoken_vowel = text.startswith("8") or text.split("-")[0].split(".")[0] in ("11", "18")
    return f"{'an' if spoken_vowel else 'a'} {text} gap"
