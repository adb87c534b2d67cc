import pytest
from scipy.stats import binomtest

from evals.result import ItemResult
from evals.stats import (
    DuplicateItems,
    NoiseFloor,
    ParamsMismatch,
    against_floor,
    by_family,
    mcnemar,
    pair,
    summarise,
    wilson,
)


def arm(
    outcomes: list[str], target: str = "t", params: str = "h", family: str = "f", **kw
) -> list[ItemResult]:
    return [
        ItemResult(target, f"i{i}", f"d{i}", family, o, params_hash=params, **kw)  # type: ignore[arg-type]
        for i, o in enumerate(outcomes)
    ]


def split(n: int, a_only: int, b_only: int, both: int) -> tuple[list[str], list[str]]:
    """Two arms over n items with the given concordant/discordant counts."""
    a = ["correct"] * both + ["correct"] * a_only + ["wrong"] * b_only
    b = ["correct"] * both + ["wrong"] * a_only + ["correct"] * b_only
    rest = n - len(a)
    return a + ["wrong"] * rest, b + ["wrong"] * rest


@pytest.mark.parametrize("k,n", [(0, 10), (5, 10), (10, 10), (1, 3), (81, 263), (400, 403)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    low, high = wilson(k, n)
    ref = binomtest(k, n).proportion_ci(method="wilson")
    assert low == pytest.approx(ref.low, abs=1e-12)
    assert high == pytest.approx(ref.high, abs=1e-12)


def test_wilson_known_values() -> None:
    assert wilson(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    assert wilson(0, 10)[0] == 0.0
    assert wilson(0, 10)[1] == pytest.approx(0.277533, abs=1e-6)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(11, 10)


def test_summary_keeps_every_item_in_the_denominator() -> None:
    outcomes = ["correct"] * 6 + ["wrong", "truncated", "timeout", "error"]
    results = [
        ItemResult(
            "t",
            f"i{i}",
            f"d{i}",
            "f",
            o,
            finish_reason="length" if o == "truncated" else "stop",
            output_tokens=10 * (i + 1),
        )  # type: ignore[arg-type]
        for i, o in enumerate(outcomes)
    ]
    s = summarise(results)
    assert (s.n, s.correct, s.accuracy) == (10, 6, 0.6)
    assert s.rates["truncated"] == s.rates["timeout"] == s.rates["error"] == 0.1
    assert s.rates["unparsed"] == 0.0
    assert s.length_stop_rate == 0.1
    assert s.mean_output_tokens == 55.0
    assert s.ci == wilson(6, 10)


def test_by_family_adds_overall() -> None:
    results = arm(["correct", "wrong"], family="a") + [
        ItemResult("t", "x", "dx", "b", "correct", params_hash="h")
    ]
    fams = by_family(results)
    assert list(fams) == ["a", "b", "overall"]
    assert fams["a"].accuracy == 0.5 and fams["b"].accuracy == 1.0
    assert fams["overall"].n == 3


def test_mcnemar_is_the_exact_binomial_test() -> None:
    assert mcnemar(1, 9)[0] == pytest.approx(22 / 1024)
    for b, c in [(3, 7), (11, 20), (29, 14), (0, 5)]:
        assert mcnemar(b, c)[0] == pytest.approx(binomtest(b, b + c, 0.5).pvalue)
    assert mcnemar(0, 0) == (1.0, 1.0)
    p, mid = mcnemar(1, 9)
    assert mid < p  # mid-p is less conservative
    assert mcnemar(5, 5)[1] == pytest.approx(1.0)


def test_reference_000_aider_split() -> None:
    # 56 both, 71 neither, 89 only flash-next, 9 only the other: p = 1.1e-17.
    a, b = split(225, a_only=9, b_only=89, both=56)
    p = pair(arm(a), arm(b))
    assert (p.n, p.only_a, p.only_b) == (225, 9, 89)
    assert p.p_value == pytest.approx(1.1e-17, rel=0.01)


def test_pairing_refuses_different_sampling_parameters() -> None:
    with pytest.raises(ParamsMismatch, match="not at parity"):
        pair(arm(["correct"], params="h1"), arm(["correct"], params="h2"))
    mixed = arm(["correct"], params="h1") + [
        ItemResult("t", "z", "dz", "f", "wrong", params_hash="h2")
    ]
    with pytest.raises(ParamsMismatch, match="mixes"):
        pair(mixed, arm(["correct"], params="h1"))


def test_pairing_refuses_repeats() -> None:
    doubled = arm(["correct"]) + arm(["wrong"])
    with pytest.raises(DuplicateItems):
        pair(doubled, arm(["correct"]))


def test_pairs_only_common_items_and_excludes_errors() -> None:
    a = arm(["correct", "correct", "error", "wrong", "truncated"])
    b = arm(["wrong", "correct", "correct", "correct", "wrong", "correct"])  # one extra item
    p = pair(a, b, "A", "B")
    assert p.n == 4 and p.errored == 1
    assert (p.only_a, p.only_b) == (1, 1)
    assert (p.only_in_a, p.only_in_b) == (0, 1)
    assert p.one_side_truncated == 1
    assert p.a_accuracy == 0.5 and p.b_accuracy == 0.5


def test_noise_floor_verdicts() -> None:
    # Control: the same configuration twice, 403 items, split 11 to 20 (the split that Sqwish
    # Labs' "Blackwell inference benchmarks" reports for its control pair).
    ca, cb = split(403, a_only=11, b_only=20, both=280)
    control = pair(arm(ca), arm(cb))
    floor = NoiseFloor.from_controls([control])
    assert floor.gap == pytest.approx(9 / 403)
    assert floor.imbalance_rate == pytest.approx(9 / 403)
    # Within the floor: 13 to 10 (speculation), and a significant-but-small split.
    within = pair(*map(arm, split(367, a_only=13, b_only=10, both=300)))
    assert not against_floor(within, floor).exceeds
    # Outside: 9 to 89.
    outside = pair(*map(arm, split(403, a_only=9, b_only=89, both=250)))
    verdict = against_floor(outside, floor)
    assert verdict.exceeds, verdict.reason
    # Significant by McNemar but no larger than the control's gap: not called real.
    edge = pair(*map(arm, split(403, a_only=0, b_only=8, both=300)))
    assert edge.p_value < 0.05
    assert not against_floor(edge, floor).exceeds


def test_noise_floor_needs_a_control() -> None:
    with pytest.raises(ValueError):
        NoiseFloor.from_controls([])


def test_items_never_answered_do_not_mix_an_arms_hash() -> None:
    """A timed-out item has no params hash (nothing was sampled): it stays in the denominator
    as not correct, but does not make the arm look sampled two ways."""
    timed_out = [ItemResult("t", "i1", "d1", "f", "timeout", params_hash="")]
    p = pair(arm(["correct"], params="h1") + timed_out, arm(["correct", "wrong"], params="h1"))
    assert p.n == 2
