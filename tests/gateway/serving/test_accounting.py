"""An upstream's usage on the record: counts that are not counts never reach the ledger raw."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.ledger.record import Record
from gateway.ledger.store import record_row
from gateway.serving.accounting import apply_usage


def _record() -> Record:
    return Record(request_id="r", door="chat", model="m", stream=False)


def test_usage_counts_are_taken_as_sent() -> None:
    r = _record()
    apply_usage(
        r,
        {
            "prompt_tokens": 12,
            "completion_tokens": "7",
            "prompt_tokens_details": {"cached_tokens": 4.0},
            "completion_tokens_details": {"reasoning_tokens": 3},
            "cost": 0.5,
        },
    )
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.reasoning_tokens) == (
        12,
        7,
        4,
        3,
    )
    assert r.charged_cost_usd == 0.5 and not r.usage_estimated and r.coerced is None


@pytest.mark.parametrize("odd", [[], {}, "many", -3, 1.5, True])
def test_an_odd_usage_count_counts_zero_and_is_named(odd: Any) -> None:
    r = _record()
    r.coerced = "max_tokens:list"
    apply_usage(
        r,
        {
            "prompt_tokens": odd,
            "completion_tokens": 5,
            "prompt_tokens_details": odd,
            "cost": float("nan"),
        },
    )
    assert r.prompt_tokens == 0 and r.completion_tokens == 5 and r.usage_estimated
    assert r.charged_cost_usd is None
    assert r.coerced is not None and r.coerced.startswith("max_tokens:list,usage.prompt_tokens:")
    assert record_row(r)["prompt_tokens"] == 0


def test_usage_that_is_not_an_object_is_an_estimate() -> None:
    r = _record()
    apply_usage(r, ["not", "usage"])  # type: ignore[arg-type]
    assert r.usage_estimated and r.prompt_tokens == 0
