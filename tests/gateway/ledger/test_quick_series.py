"""The metrics sink's quick `inc` and `observe` (`gateway.ledger.quick_series`) count what
prometheus-client's own do: the same exposition for the same values, on a bound, between bounds,
at zero, past the last bound; and where a child lacks what they read, they are its own."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.ledger.quick_series import incrementer, observer

BOUNDS = (0.005, 0.01, 0.1, 1.0, 2.5, 10.0)


def shown(registry: CollectorRegistry) -> list[bytes]:
    """The exposition, less the series' creation times (the two were made apart)."""
    return [line for line in generate_latest(registry).splitlines() if b"_created" not in line]


def pair(kind: type) -> tuple[Any, Any, CollectorRegistry, CollectorRegistry]:
    regs = CollectorRegistry(), CollectorRegistry()
    extra = {"buckets": BOUNDS} if kind is Histogram else {}
    a, b = (kind("x", "x", ["m"], registry=r, **extra).labels("smol") for r in regs)
    return a, b, *regs


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from([0.0, *BOUNDS, 1e9]), st.floats(0, 20, allow_nan=False)),
        max_size=30,
    )
)
def test_a_histogram_observed_quickly_reads_the_same(values: list[float]) -> None:
    own, quick, a, b = pair(Histogram)
    observe = observer(quick)
    for v in values:
        own.observe(v)
        observe(v)
    assert shown(a) == shown(b)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 10**6), st.floats(0.001, 1e6)), max_size=20))
def test_a_counter_counted_quickly_reads_the_same(amounts: list[float]) -> None:
    own, quick, a, b = pair(Counter)
    inc = incrementer(quick)
    for n in amounts:
        own.inc(n)
        inc(n)
    assert shown(a) == shown(b)


def test_a_child_without_the_attributes_is_counted_by_its_own_methods() -> None:
    class Odd:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def inc(self, n: float) -> None:
            self.seen.append(n)

        def observe(self, v: float) -> None:
            self.seen.append(-v)

    odd = Odd()
    incrementer(odd)(2)
    observer(odd)(3)
    assert odd.seen == [2, -3]


def test_the_installed_prometheus_client_is_counted_the_quick_way() -> None:
    """The quick way reads prometheus-client's private value objects and falls back, silently,
    to the public methods where they are missing: an upgrade that renamed them would leave the
    metrics right but every request slower. This fails instead, so the upgrade is looked at."""
    counter, _, _, _ = pair(Counter)
    histogram, _, _, _ = pair(Histogram)
    assert incrementer(counter) == counter._value.inc
    assert incrementer(counter) != counter.inc
    assert observer(histogram) != histogram.observe
