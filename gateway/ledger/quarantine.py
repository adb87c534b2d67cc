"""Rows the store refuses, set aside one by one so that none holds back another.

A batch the database refuses for what is in it (a value it cannot bind or hold: a DataError,
IntegrityError, ProgrammingError, a driver's TypeError or OverflowError) is split in two and
each half written in its own transaction, down to the single rows that fail; each of those goes
to the store's `quarantine` table as JSON with the database's reason. Every other row of the
batch is written. A batch refused because the database is away (an OperationalError: the
server down, SQLite locked past its busy timeout) is not split: nothing is quarantined, the
caller spools what is left and tries again later.

Why a table in the store and not a file beside the spool: a row is quarantined only while the
store answers, so the table is there to take it; it outlives the pod's disk; every gateway on
the store sees the same rows (the count on `/health` and in the metrics is the store's); and
an operator reads a quarantined row with the reason next to the requests it belongs to, in
SQL. Once a row is there it is never retried automatically: the reason is a fact about the
row, not about the moment.
"""

from __future__ import annotations

import json
import logging
import time as _time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gateway.ledger.database import writing
from gateway.ledger.rows import QUARANTINE
from gateway.ledger.store import Store

log = logging.getLogger(__name__)

Row = dict[str, Any]
_AWAY = (sa.exc.OperationalError, sa.exc.TimeoutError, sa.exc.DisconnectionError)


def row_fault(error: BaseException) -> bool:
    """Whether the database refused a batch for what is in it (not for being away)."""
    if isinstance(error, _AWAY):
        return False
    if isinstance(error, sa.exc.DBAPIError) and error.connection_invalidated:
        return False
    return isinstance(error, sa.exc.StatementError | TypeError | ValueError | OverflowError)


def reason_of(error: BaseException) -> str:
    """The database's own words (not SQLAlchemy's dump of the statement and its parameters)."""
    inner = getattr(error, "orig", None) or error
    text = f"{type(inner).__name__}: {inner}".replace("\x00", "")
    return text[:1000]


@dataclass(slots=True)
class Written:
    """What became of a batch: rows and contents written, and those quarantined."""

    rows: int = 0
    contents: int = 0
    quarantined: int = 0


class StoreAway(Exception):
    """The store did not answer; `left` is what was not written (rows, contents)."""

    def __init__(self, cause: BaseException, left: tuple[list[Row], list[Row]], done: Written):
        super().__init__(f"{type(cause).__name__}: {str(cause)[:200]}")
        self.cause = cause
        self.left = left
        self.done = done  # what was written (and quarantined) before


def write_sorted(store: Store, rows: Sequence[Row], contents: Sequence[Row]) -> Written:
    """Write a batch; a row the store refuses is quarantined alone (`StoreAway` if the store is
    away: its `left` is every row not yet written, to spool)."""
    done = Written()
    items = [("requests", r) for r in rows] + [("contents", c) for c in contents]
    pending = [items]
    while pending:
        part = pending.pop()
        try:
            store.write(*_split(part))
        except Exception as e:
            if not row_fault(e):
                left = [item for p in (*pending, part) for item in p]
                raise StoreAway(e, _split(left), done) from e
            if len(part) == 1:
                try:
                    quarantine(store, part[0], reason_of(e))
                except Exception as q:
                    left = [i for p in (*pending, part) for i in p]
                    raise StoreAway(q, _split(left), done) from q
                done.quarantined += 1
                continue
            half = len(part) // 2
            pending += [part[half:], part[:half]]  # the first half is written first
            continue
        for kind, _ in part:
            if kind == "requests":
                done.rows += 1
            else:
                done.contents += 1
    return done


def _split(items: Sequence[tuple[str, Row]]) -> tuple[list[Row], list[Row]]:
    rows = [r for kind, r in items if kind == "requests"]
    return rows, [c for kind, c in items if kind == "contents"]


def quarantine(store: Store, item: tuple[str, Row], reason: str) -> None:
    kind, row = item
    values = {
        "kind": kind,
        "time": _number(row.get("time")),
        "request_id": str(row.get("request_id"))[:128].replace("\x00", ""),
        "row": json.dumps(row, default=repr, separators=(",", ":")),
        "reason": reason,
        "quarantined": _time.time(),
    }
    insert = (postgresql if store.postgres else sqlite).insert
    with writing(store.engine) as conn:
        conn.execute(insert(QUARANTINE).values(**values).on_conflict_do_nothing())
    log.error(
        "record %s quarantined: the store refused its %s row (%s)",
        values["request_id"],
        kind,
        reason[:300],
    )


def _number(value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return 0.0
    return f if f == f and abs(f) != float("inf") else 0.0


def quarantined(store: Store) -> int:
    """How many rows the store holds in quarantine (every gateway's)."""
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(QUARANTINE)).scalar() or 0)


def held(store: Store, kind: str = "requests") -> list[dict[str, Any]]:
    """The quarantined rows of `kind`, each with its row decoded (tests, inspection)."""
    q = sa.select(QUARANTINE).where(QUARANTINE.c.kind == kind).order_by(QUARANTINE.c.quarantined)
    with store.engine.connect() as conn:
        out = [dict(r._mapping) for r in conn.execute(q)]
    for r in out:
        r["row"] = json.loads(r["row"])
    return out
