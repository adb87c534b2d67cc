"""Retention: how long the store keeps each thing, applied by housekeeping once an hour.

- **Request rows**: `[store] retention_days`, whole UTC days (PostgreSQL drops day partitions,
  SQLite deletes in short transactions: `gateway/ledger/store.py`); refusals age out with them.
- **Contents** (prompts and responses, `store_content`): `content_retention_days`.
- **Rollups**, the 5-minute sums every cost, health and traffic report and console panel reads
  for whole buckets (`gateway/ledger/rollups.py`): `rollup_retention_days`, by default as long
  as the rows. Longer keeps those reports over windows past the rows: at the seed's rate a day
  of rows is 26 M rows and about 11 GB on PostgreSQL, a day of rollups a few thousand rows, so
  a store can hold two days of rows and a year of cost. Each raw day then goes only once its
  buckets are rolled up (the rollup mark past its end), and the first day kept is remembered
  (`rollups.set_raw_floor`): a late record for a dropped day cannot have its bucket rolled up
  again from that record alone. A window that starts inside a dropped day starts at its next
  whole 5 minutes (its partial first bucket was read from rows). What reads the rows themselves
  (latency percentiles from the newest rows, shadow pairs, a request by id) covers the rows'
  retention only.
- **Stored responses** (Responses door, Messages threads): `responses_retention_days`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from sqlalchemy.engine import Engine

from gateway.ledger import responses_store, rollups, sweep
from gateway.ledger.database import writing
from gateway.ledger.partitions import DAY, day_start
from gateway.ledger.rows import REJECTIONS

log = logging.getLogger(__name__)


class Store(Protocol):
    """What retention uses of `gateway.ledger.store.Store`."""

    engine: Engine
    postgres: bool
    closing: threading.Event  # ends a SQLite sweep in progress

    def drop_before(self, table: str, cutoff: float) -> int: ...


def apply(
    store: Store,
    retention_days: int,
    content_retention_days: int,
    now: float | None = None,
    responses_retention_days: float | None = None,
    rollup_retention_days: int | None = None,
) -> dict[str, int]:
    """Drop what is past its retention (see the module); returns what went, by kind."""
    now = time.time() if now is None else now
    cut = now - retention_days * DAY
    if store.postgres:
        with writing(store.engine) as conn:
            conn.execute(REJECTIONS.delete().where(REJECTIONS.c.time < cut))
    else:
        sweep.delete_before(store.engine, REJECTIONS.name, "time", cut, stop=store.closing)
    keep_rollups = max(rollup_retention_days or retention_days, retention_days)
    if keep_rollups > retention_days:
        cut = _rolled_up(store, cut)
    dropped = {
        "requests": store.drop_before("requests", cut),
        "contents": store.drop_before("contents", now - content_retention_days * DAY),
    }
    if keep_rollups > retention_days:
        with writing(store.engine) as conn:
            rollups.set_raw_floor(conn, day_start(cut))  # the first day `drop_before` kept
    rollups.forget_before(store.engine, now - keep_rollups * DAY)
    if responses_retention_days is not None:
        cutoff = now - responses_retention_days * DAY
        dropped["stored_responses"] = responses_store.purge(store.engine, cutoff)
    return dropped


def _rolled_up(store: Store, cut: float) -> float:
    """`cut`, or the rollup mark where that is earlier: raw rows outlive their rollups' making."""
    with store.engine.connect() as conn:
        upto = rollups.mark(conn)
    if upto is not None and upto >= cut:
        return cut
    held = "none rolled up yet" if upto is None else f"behind by {(cut - upto) / 3600:.1f} h"
    log.warning("retention keeps request rows until they are rolled up (rollups %s)", held)
    return 0.0 if upto is None else float(upto)
