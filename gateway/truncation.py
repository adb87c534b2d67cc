"""Why a truncated answer stopped: the client's own cap, or the server cutting it short.

An answer that ends with `finish_reason: "length"` (Anthropic `max_tokens`, Responses
`incomplete`) is `truncated` on its record. That is two different events:

    cause        when                                                    what it says
    client_cap   the request carried a cap (`max_tokens`,                the client asked for
                 `max_completion_tokens`, `max_output_tokens`, or one    at most N tokens and
                 its profile filled in) and the completion reached it    got N: working as asked
    upstream     no cap, or the completion stopped short of it           the server's own limit
                                                                         or its context window
                                                                         cut the answer

`record.max_tokens` is the cap the request carried, read after the profile was applied (so a
profile's cap counts as the client's: the gateway applied it on the route's behalf). An answer
whose completion tokens were never counted (no usage from the upstream and nothing streamed
to count) is taken as capped when there was a cap: nothing shows the server cut it short.
With `n > 1`, completion tokens are summed over the choices, so a cut choice among long ones
reads as capped.

Only `upstream` cuts are the truncation watchdog's business (`gateway/watchdog.py`); the reports
and `gateway_truncations_total{cause}` show both. `capped_clause` is the same rule in SQL for the
reports, which count stored rows; `tests/gateway/test_truncation.py` holds the two together.
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa

from gateway.record import Record

Cause = Literal["client_cap", "upstream"]
CAUSES: tuple[Cause, ...] = ("client_cap", "upstream")


def cause(record: Record) -> Cause | None:
    """`client_cap` or `upstream` for a truncated record; None for one that was not cut."""
    if not record.truncated:
        return None
    cap = record.max_tokens
    if cap is not None and (
        record.completion_tokens >= cap
        or (record.usage_estimated and record.completion_tokens == 0)
    ):
        return "client_cap"
    return "upstream"


def capped_clause(t: sa.Table) -> Any:
    """SQL: the rows of the requests table `t` that `cause` calls `client_cap`."""
    return sa.and_(
        t.c.truncated == sa.true(),
        t.c.max_tokens.is_not(None),
        sa.or_(
            t.c.completion_tokens >= t.c.max_tokens,
            sa.and_(t.c.usage_estimated == sa.true(), t.c.completion_tokens == 0),
        ),
    )


def upstream_cut_clause(t: sa.Table) -> Any:
    """SQL: the rows of `t` that `cause` calls `upstream`."""
    return sa.and_(t.c.truncated == sa.true(), sa.not_(capped_clause(t)))
