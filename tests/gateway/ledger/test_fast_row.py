"""The request path's typed row (`gateway.ledger.fast_row.row_of`) is `typed_row`'s, exactly:
for ordinary records (the fast path) and for records with odd values in any field (hypothesis
picks the fields and the values), and the odd values are still replaced and named."""

from __future__ import annotations

import math
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.ledger.columns import COLUMNS, typed_row
from gateway.ledger.fast_row import _fast, row_of, values_of
from gateway.ledger.record import Attempt, Record

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=200),
    st.sampled_from(["", "a\x00b", "x" * 129, "y" * 40, [], {}, [1, 2], {"a": 1}, 2**31, -(2**31)]),
)
FIELDS = [c.name for c in COLUMNS if c.name != "attempts"]


def ordinary() -> Record:
    r = Record(request_id="req_0123456789abcdef", door="chat", model="m", stream=True)
    r.attempts = [Attempt("u0", "http_503", 503, 0.01), Attempt("u1", "ok", 200, 0.5)]
    r.upstream, r.status, r.shape, r.finish_reason = "u1", 200, "default", "stop"
    r.prompt_tokens, r.completion_tokens, r.chunks, r.max_tokens = 12, 64, 64, 64
    r.queue_s, r.ttft_s, r.ttfa_s, r.e2e_s = 0.0001, 0.1, 0.1, 6.4
    r.itl_mean_s, r.itl_p99_s, r.cost_usd, r.params_hash = 0.1, 0.12, 1e-05, "ab" * 16
    r.trace_id, r.coerced = "f" * 32, "stream:list"
    return r


def test_an_ordinary_record_takes_the_fast_path_to_the_same_row() -> None:
    r = ordinary()
    assert _fast(r) is not None
    assert row_of(r) == typed_row(r)
    assert list(row_of(r)) == list(typed_row(r))  # the same columns, in the same order
    fresh = Record(request_id="r", door="chat", model="m", stream=False)  # nothing set yet
    assert _fast(fresh) == typed_row(fresh)


def test_attempts_are_json_text_with_nan_as_null() -> None:
    r = ordinary()
    r.attempts.append(Attempt("ü", "ok", None, math.nan))
    row = row_of(r)
    assert row == typed_row(r)
    assert orjson.loads(row["attempts"])[-1] == {
        "upstream": "ü",
        "outcome": "ok",
        "status": None,
        "elapsed_s": None,
    }


@settings(max_examples=400, deadline=None)
@given(values=st.dictionaries(st.sampled_from(FIELDS), ODD, min_size=1, max_size=4))
def test_odd_values_give_typed_rows_own_answer(values: dict[str, Any]) -> None:
    r = ordinary()
    for name, value in values.items():
        setattr(r, name, value)
    expected = typed_row(r)
    assert row_of(r) == expected
    if _fast(r) is not None:  # passed as it was: nothing needed replacing
        assert expected["coerced"] == r.coerced


@settings(max_examples=100, deadline=None)
@given(
    status=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
    elapsed=st.floats(allow_nan=True, allow_infinity=True),
)
def test_odd_attempts_give_typed_rows_own_answer(status: int | None, elapsed: float) -> None:
    r = ordinary()
    r.attempts.append(Attempt("u2", "ok", status, elapsed))
    assert row_of(r) == typed_row(r)


def test_the_stores_values_are_the_rows_in_column_order_a_missing_one_none() -> None:
    columns = tuple(c.name for c in COLUMNS)
    row = row_of(ordinary())
    assert values_of([row], columns) == [tuple(row[c] for c in columns)]
    old = {k: v for k, v in row.items() if k != "trace_id"}  # spooled before the column was
    assert values_of([row, old], columns)[1] == tuple(old.get(c) for c in columns)
