"""A labelled Prometheus child counted without prometheus-client's checks on every call.

`Counter.inc` checks that the child is not a parent with labels and that the amount is not
negative, then increments its value; `Histogram.observe` makes the same check, then walks its
buckets' bounds in Python to find the one to count. The metrics sink (`gateway.ledger.metrics`)
does this about fifteen times for every request, on the event loop, with values it has already
checked (counts above zero, latencies not below zero) on children it made with all their labels.

`incrementer(child)` is the child's value's own `inc`; `observer(child)` counts the bucket
found by bisection and the sum, as `observe` does. Both are prometheus-client's own value
objects (a lock each, or in multiprocess mode the worker's mmap file), so what a scrape reads is
unchanged; only the checks and the walk are gone. Where a child lacks the attributes they read
(another prometheus-client), they are its public `inc` and `observe`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any


def incrementer(child: Any) -> Callable[[float], None]:
    """`child.inc`, for amounts the caller knows are not negative."""
    value = getattr(child, "_value", None)
    inc = getattr(value, "inc", None)
    return inc if callable(inc) else child.inc


class _Observer:
    __slots__ = ("bounds", "buckets", "total")

    def __init__(self, bounds: Sequence[float], buckets: Sequence[Any], total: Any):
        self.bounds = bounds
        self.buckets = buckets
        self.total = total

    def __call__(self, amount: float) -> None:
        # The first bucket whose upper bound is at least `amount` (the last is +Inf): the one
        # `Histogram.observe` counts.
        self.buckets[bisect_left(self.bounds, amount)].inc(1)
        self.total.inc(amount)


def observer(child: Any) -> Callable[[float], None]:
    """`child.observe`, for amounts the caller knows are numbers (not NaN)."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        return child.observe
    return _Observer(bounds, buckets, total)
