"""Why a truncated answer stopped: the client's own cap, or the server cutting it short.

An answer that ends with `finish_reason: "length"` (Anthropic `max_tokens`, Responses
`incomplete`) is `truncated` on its record. That is two different events:

    cause        when                                                    what it says
    client_cap   the request carried a cap (`max_tokens`,                the client asked for
                 `max_completion_tokens`, `max_output_tokens`, or one    at most N tokens and
                 its profile filled in) and the completion reached it    got N: working as asked
    upstream     no cap, the completion stopped short of it, or the     the server's own limit
                 cap was one the gateway cut to fit the served window    or its context window
                                                                         cut the answer

`record.max_tokens` is the cap the request carried, read after the profile was applied (so a
profile's cap counts as the client's: the gateway applied it on the route's behalf). A cap the
gateway cut to fit the served window (`record.clamped`, or the Messages door's `max_tokens`
marked on `record.dropped`) is the window's, not the client's: an answer that reaches it was cut
by the window, `upstream`. An answer whose completion tokens were never counted (no usage from
the upstream and nothing streamed to count) is taken as capped when there was a cap: nothing
shows the server cut it short. With `n > 1`, completion tokens are summed over the choices, so
a cut choice among long ones reads as capped.

A stream the upstream ended before it said it had finished (no finish reason, no `[DONE]`:
`UpstreamCut`; or its connection lost mid-answer: `WireError`) is `truncated` too, with that
error class on its record: an `upstream` cut whatever its cap, even one whose completion reached
it (the upstream never said it stopped there).

Only `upstream` cuts are the truncation watchdog's business (`gateway/trust/watchdog.py`); the
reports
and `gateway_truncations_total{cause}` show both. `capped_clause` is the same rule in SQL for the
reports, which count stored rows; `tests/gateway/ledger/test_truncation.py` holds the two together.
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa

from gateway.ledger.record import Record

Cause = Literal["client_cap", "upstream"]
CAUSES: tuple[Cause, ...] = ("client_cap", "upstream")
# The error classes of a stream the upstream cut (gateway/serving/stream_relay.py).
CUT_CLASSES = ("UpstreamCut", "WireError")


def cause(record: Record) -> Cause | None:
    """`client_cap` or `upstream` for a truncated record; None for one that was not cut."""
    if not record.truncated:
        return None
    return length_cause(record)


def length_cause(record: Record) -> Cause:
    """`cause` of an answer that stopped at its length (`finish_reason: "length"`), whether or
    not the record is marked `truncated` yet: what a door asks when it ends the answer (the
    Responses door's `incomplete`, the Messages door's stop reason)."""
    if record.error_class in CUT_CLASSES:
        return "upstream"
    cap = record.max_tokens
    if (
        cap is not None
        and not window_clamped(record)
        and (
            record.completion_tokens >= cap
            or (record.usage_estimated and record.completion_tokens == 0)
        )
    ):
        return "client_cap"
    return "upstream"


def window_clamped(record: Record) -> bool:
    """The gateway cut the request's cap to the served window (gateway/serving/adapt.py marks
    `clamped`; the Messages door marks `max_tokens` among what it dropped)."""
    return bool(record.clamped) or "max_tokens" in (record.dropped or "").split(",")


def capped_clause(t: sa.Table) -> Any:
    """SQL: the rows of the requests table `t` that `cause` calls `client_cap`."""
    dropped = sa.literal(",") + sa.func.coalesce(t.c.dropped, "") + sa.literal(",")
    return sa.and_(
        t.c.truncated == sa.true(),
        sa.or_(t.c.error_class.is_(None), t.c.error_class.not_in(CUT_CLASSES)),
        t.c.max_tokens.is_not(None),
        t.c.clamped.is_(None),
        sa.not_(dropped.like("%,max_tokens,%")),
        sa.or_(
            t.c.completion_tokens >= t.c.max_tokens,
            sa.and_(t.c.usage_estimated == sa.true(), t.c.completion_tokens == 0),
        ),
    )


def upstream_cut_clause(t: sa.Table) -> Any:
    """SQL: the rows of `t` that `cause` calls `upstream`."""
    return sa.and_(t.c.truncated == sa.true(), sa.not_(capped_clause(t)))
