"""A rejection: a request the gateway refused before it had a record, counted all the same.

An unknown model (404), a body that is not JSON or a parameter that fails validation (400), a
missing or wrong key (401), a key past its budget (429): none of these reaches an upstream, so
none has a `Record`; each gets a `Rejection` instead, kept in the `rejections` table and counted
in `gateway_rejected_requests_total{door,reason}`. It says why (`reason`, one of `REASONS`),
with what status, at which door, by which key id (never the key), for which model as asked
(cut to `MODEL_CHARS`; the metric never names it) and under which request id (the one its
answer carried). Nothing of a secret or a body is kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from time import time as wall_clock
from typing import Any

import sqlalchemy as sa

from gateway.ledger.database import writing
from gateway.ledger.rows import REJECTIONS

log = logging.getLogger(__name__)

# The bounded reason set (a label value); anything else is "other".
REASONS = (
    "unknown_model",  # 404: the model is not a configured route or alias
    "bad_json",  # 400: the body is empty, not JSON, or nested too deep
    "bad_request",  # 400: a parameter the door refuses (validation)
    "too_large",  # 413 / 431: the body or the headers past their limit
    "unauthorized",  # 401: no key, or a key the gateway does not know
    "forbidden",  # 403: a key that may not use this path or model
    "over_budget",  # 429: the key's request or token budget for its window is spent
    "unavailable",  # 503: no upstream could be tried, or the gateway is shutting down
    "other",
)
# The doors (a label value); a path that is none of these is "other".
DOORS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
MODEL_CHARS = 128


def door_of(path: str) -> str:
    return DOORS.get(path, "other")


def bounded_model(model: object) -> str | None:
    """The model as the client asked for it, cut to fit the column; None if not a string."""
    return model[:MODEL_CHARS] if isinstance(model, str) else None


@dataclass(slots=True)
class Rejection:
    request_id: str
    door: str
    reason: str
    status: int
    time: float = field(default_factory=wall_clock)
    client_request_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    lane: str = "client"

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            self.reason = "other"
        self.model = bounded_model(self.model)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def write_rejections(engine: sa.Engine, rows: Sequence[dict[str, Any]]) -> None:
    """Keep refused requests (`Rejection.as_row()`) in one transaction."""
    if rows:
        with writing(engine) as conn:
            conn.execute(REJECTIONS.insert(), list(rows))


def rejection_counts(conn: sa.Connection, since: float, until: float) -> list[dict[str, Any]]:
    """Refusals in [since, until) per (door, reason, status), most first, with the newest
    time and model as asked of each group."""
    t = REJECTIONS
    query = (
        sa.select(
            t.c.door,
            t.c.reason,
            t.c.status,
            sa.func.count().label("requests"),
            sa.func.max(t.c.time).label("last"),
            sa.func.max(t.c.model).label("model"),
        )
        .where(t.c.time >= since, t.c.time < until)
        .group_by(t.c.door, t.c.reason, t.c.status)
        .order_by(sa.func.count().desc(), t.c.reason)
    )
    return [dict(r._mapping) for r in conn.execute(query)]


class RejectionWriter:
    """Hands rejections to the store off the event loop, one write at a time: those refused
    while a write runs go in the next. A flood of bad keys costs one transaction per batch."""

    def __init__(self, engine: sa.Engine | None, limit: int = 10_000):
        self.engine = engine
        self.limit = limit
        self.pending: list[dict[str, Any]] = []
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None

    def submit(self, rejection: Rejection) -> None:
        if self.engine is None:
            return
        if len(self.pending) >= self.limit:
            self.dropped += 1
            return
        self.pending.append(rejection.as_row())
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            try:
                await asyncio.to_thread(write_rejections, self.engine, batch)  # type: ignore[arg-type]
            except Exception:
                log.exception("could not keep %d rejections", len(batch))

    async def drain(self) -> None:
        if self._task is not None:
            await self._task


def rejections_text(groups: Sequence[dict[str, Any]]) -> str:
    """`report health`'s lines on refused requests (`rejection_counts`)."""
    if not groups:
        return "\nRejected requests: none\n"
    total = sum(g["requests"] for g in groups)
    lines = [f"\nRejected requests: {total:,}"]
    for g in groups:
        model = f", model asked {g['model']!r}" if g["model"] else ""
        lines.append(f"  {g['reason']} ({g['status']}) at {g['door']}: {g['requests']:,}{model}")
    return "\n".join(lines) + "\n"
