"""Why an answer was cut (`gateway/ledger/truncation.py`): the client's own cap or the upstream, the
same in Python (watchdog, metrics) and in SQL (the reports)."""

from __future__ import annotations

import itertools
from pathlib import Path

import sqlalchemy as sa

from gateway.ledger.record import Record
from gateway.ledger.rows import REQUESTS
from gateway.ledger.store import Store, record_row
from gateway.ledger.truncation import capped_clause, cause, upstream_cut_clause


def record(i: int, **fields: object) -> Record:
    r = Record(f"req-{i}", "chat", "m", False, time=1000.0 + i, upstream="a", status=200)
    for k, v in fields.items():
        setattr(r, k, v)
    return r


def test_the_cap_reached_is_the_clients_and_anything_short_of_it_the_upstreams() -> None:
    assert cause(record(0)) is None  # not truncated
    assert cause(record(0, truncated=True, max_tokens=16, completion_tokens=16)) == "client_cap"
    assert cause(record(0, truncated=True, max_tokens=16, completion_tokens=40)) == "client_cap"
    # Stopped short of the cap it was given: the server's limit or its window cut it.
    assert cause(record(0, truncated=True, max_tokens=4096, completion_tokens=900)) == "upstream"
    # No cap at all: only the server can have stopped it.
    assert cause(record(0, truncated=True, completion_tokens=900)) == "upstream"
    # A capped answer whose tokens nobody counted: nothing shows the server cut it.
    uncounted = record(0, truncated=True, max_tokens=16, usage_estimated=True)
    assert cause(uncounted) == "client_cap"
    assert cause(record(0, truncated=True, usage_estimated=True)) == "upstream"


def test_a_stream_the_upstream_cut_is_the_upstreams_whatever_its_cap() -> None:
    """Ended before the upstream said it finished (no finish reason, no [DONE]), or its
    connection lost mid-answer: the upstream's cut, even with nothing counted under a cap."""
    for error_class in ("UpstreamCut", "WireError"):
        cut = record(0, truncated=True, max_tokens=16, usage_estimated=True, status=502)
        cut.error_class = error_class
        assert cause(cut) == "upstream"
        cut.completion_tokens = 16
        assert cause(cut) == "upstream"


def test_a_cap_the_gateway_cut_to_the_window_is_the_windows() -> None:
    """Claude Code asks for 32,000 tokens; the gateway clamps that to what fits beside the
    prompt. An answer that reaches the clamp was cut by the served window, not by the client."""
    adapted = record(0, truncated=True, max_tokens=32000, completion_tokens=7000)
    adapted.clamped = "max_tokens=32000->7000"
    assert cause(adapted) == "upstream"
    door = record(0, truncated=True, max_tokens=7000, completion_tokens=7000)
    door.dropped = "tools.web_search,max_tokens"  # the Messages door clamped and marked it
    assert cause(door) == "upstream"
    door.dropped = "tools.web_search"
    assert cause(door) == "client_cap"


def test_the_reports_sql_agrees_with_the_rule_on_every_combination(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    marks = [(None, None), ("max_tokens=99->16", None), (None, "max_tokens"), (None, "tools.x")]
    marks += [(None, "a,max_tokens,b"), (None, "max_tokens_x")]
    records = [
        record(
            i,
            truncated=t,
            max_tokens=cap,
            completion_tokens=n,
            usage_estimated=est,
            clamped=clamped,
            dropped=dropped,
            error_class=error,
        )
        for i, (t, cap, n, est, (clamped, dropped), error) in enumerate(
            itertools.product(
                [True, False],
                [None, 1, 16, 17],
                [0, 15, 16, 17],
                [True, False],
                marks,
                [None, "UpstreamCut", "WireError", "UpstreamStreamError"],
            )
        )
    ]
    store.write([record_row(r) for r in records])
    t = REQUESTS
    try:
        with store.engine.connect() as conn:
            capped = set(conn.scalars(sa.select(t.c.request_id).where(capped_clause(t))))
            cut = set(conn.scalars(sa.select(t.c.request_id).where(upstream_cut_clause(t))))
    finally:
        store.close()
    assert capped == {r.request_id for r in records if cause(r) == "client_cap"}
    assert cut == {r.request_id for r in records if cause(r) == "upstream"}
    assert capped and cut
