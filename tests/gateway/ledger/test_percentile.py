"""The one percentile (q in 0–1, linear interpolation), against the standard library's."""

from __future__ import annotations

import math
import statistics
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.ledger.percentile import percentile


def test_small_cases() -> None:
    assert math.isnan(percentile([], 0.5))
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([5.0, 1.0, 4.0, 2.0, 3.0], 0.5) == 3.0
    assert percentile([0.0, 10.0], 0.99) == pytest.approx(9.9)
    assert percentile(array("d", [2.0, 1.0]), 0.0) == 1.0
    assert percentile([2.0, 1.0], 1.0) == 2.0


@pytest.mark.parametrize("q", [-0.1, 1.5, 50, 99])
def test_q_outside_0_1_is_refused(q: float) -> None:
    # A caller still on the 0–100 convention fails loudly instead of reading the maximum.
    with pytest.raises(ValueError, match="0–1"):
        percentile([1.0, 2.0], q)


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=60), st.integers(1, 99))
def test_agrees_with_statistics_inclusive(values: list[float], k: int) -> None:
    want = statistics.quantiles(values, n=100, method="inclusive")[k - 1]
    assert percentile(values, k / 100) == pytest.approx(want, rel=1e-9, abs=1e-6)
