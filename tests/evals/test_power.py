"""The paired test's power, MDE and sample size (`evals/power.py`) against known values and
independent computations."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest, multinomial

from evals.power import (
    Resolution,
    _reject_upto,
    connor_n,
    gap_phrase,
    items_needed,
    mde,
    points,
    power,
)


def test_rejection_region_matches_the_sign_test_table() -> None:
    # Critical values of the two-sided sign test at 0.05 (the table in every statistics text):
    # reject when the smaller count is at most this.
    table = {5: -1, 6: 0, 8: 0, 9: 1, 11: 1, 12: 2, 14: 2, 15: 3, 17: 4, 20: 5, 25: 7, 30: 9}
    ks = _reject_upto(np.array(list(table)), 0.05)
    assert dict(zip(table, ks.tolist(), strict=True)) == table
    # ...and agrees with scipy's exact binomial test at every m from 1 to 60.
    for m, k in enumerate(_reject_upto(np.arange(61), 0.05).tolist()):
        if m == 0:
            assert k == -1
            continue
        rejects = [b for b in range(m + 1) if binomtest(b, m, 0.5).pvalue < 0.05]
        assert rejects == [b for b in range(m + 1) if min(b, m - b) <= k], m


def _brute_power(n: int, psi: float, gap: float, alpha: float = 0.05) -> float:
    """Every (only A, only B, agree) split of n items, weighted by its multinomial probability,
    tested with scipy's binomtest: no shortcut shared with `power`."""
    probs = [(psi + gap) / 2, (psi - gap) / 2, 1 - psi]
    total = 0.0
    for b, c in itertools.product(range(n + 1), repeat=2):
        if b + c > n or b + c == 0:
            continue
        if binomtest(b, b + c, 0.5).pvalue < alpha:
            total += float(multinomial.pmf([b, c, n - b - c], n, probs))
    return total


@pytest.mark.parametrize(
    ("n", "psi", "gap"), [(12, 0.5, 0.3), (20, 0.3, 0.2), (25, 0.6, 0.1), (30, 0.2, 0.2)]
)
def test_exact_power_equals_enumeration(n: int, psi: float, gap: float) -> None:
    assert power(n, psi, gap) == pytest.approx(_brute_power(n, psi, gap), abs=1e-9)


def test_known_small_cases() -> None:
    # Six items all going one way is the least that rejects at 0.05; five never does.
    assert power(6, 1.0, 1.0) == pytest.approx(1.0)
    assert power(5, 1.0, 1.0) == 0.0
    # 3 of 3 correct against 0 of 3: no round of 3 items can tell any gap apart.
    assert mde(3, 1.0) is None
    assert Resolution.of(3, 1.0).sentence().startswith("this round cannot tell any gap apart")


def test_connor_sample_size_from_tabulated_quantiles() -> None:
    # Connor (1987): n = (z_{1-a/2} sqrt(psi) + z_{1-b} sqrt(psi - d^2))^2 / d^2, here with the
    # tabulated z of 1.959964 (a = 0.05) and 1.281552 (power 0.9), psi = 0.3, d = 0.1.
    expected = (1.959964 * math.sqrt(0.3) + 1.281552 * math.sqrt(0.29)) ** 2 / 0.01
    assert connor_n(0.3, 0.1, 0.05, 0.9) == pytest.approx(expected, rel=1e-5)
    assert math.ceil(connor_n(0.3, 0.1, 0.05, 0.9)) == 312


@pytest.mark.parametrize(("psi", "gap"), [(0.15, 0.05), (0.10, 0.05), (0.3, 0.1)])
def test_items_needed_reach_the_power_and_track_connor(psi: float, gap: float) -> None:
    n = items_needed(psi, gap)
    assert power(n, psi, gap) >= 0.8
    # The exact test is a little conservative: a little above the normal approximation.
    assert connor_n(psi, gap) <= n <= 1.15 * connor_n(psi, gap)
    # ...and at Connor's n the exact power is close to the 0.8 it was solved for.
    assert power(math.ceil(connor_n(psi, gap)), psi, gap) == pytest.approx(0.8, abs=0.04)


def test_mde_is_the_gap_where_power_reaches_the_target() -> None:
    gap = mde(300, 0.12)
    assert gap is not None and 0.05 < gap < 0.07
    assert power(300, 0.12, gap) == pytest.approx(0.8, abs=1e-3)
    # More items resolve smaller gaps; at the size planned for a gap, that gap is resolved.
    assert mde(1000, 0.12) < gap < mde(100, 0.12)  # type: ignore[operator]
    assert mde(items_needed(0.15, 0.05), 0.15) <= 0.05  # type: ignore[operator]


def test_near_identical_arms_still_bound_the_gap() -> None:
    # Two arms that agree on 97.5% of 200 items: a gap needs discordance, so a 4-point gap
    # (8 discordant items all one way) would be seen.
    gap = mde(200, 0.025)
    assert gap is not None and 0.025 < gap < 0.05


def test_wording() -> None:
    assert points(0.062) == "6.2-point" and points(0.25) == "25-point"
    assert gap_phrase(0.05) == "a 5-point gap" and gap_phrase(0.08) == "an 8-point gap"
    assert gap_phrase(0.11) == "an 11-point gap"
    line = Resolution.of(300, 0.12).sentence()
    assert line.startswith("this round can tell apart a 5.8-point gap (300 paired items")
    with pytest.raises(ValueError, match="discordance"):
        power(100, 0.05, 0.1)
