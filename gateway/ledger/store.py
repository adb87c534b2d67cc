"""The record store: one `requests` row per record, optional `contents`, retention, queries.

SQLite (WAL) by default, PostgreSQL by URL (psycopg 3) for several gateways sharing one store.
The tables are declared in `gateway.ledger.rows` and built by the alembic revisions in
`gateway/ledger/migrations/`, applied at start by `gateway.ledger.database.migrate` (no
alembic.ini). Rows never copy price tables: only tokens, clocks and the computed and charged
cost.

Retention drops whole days, never row by row:

- PostgreSQL: both tables are range-partitioned by day on `time` (epoch seconds). The store
  creates a day's partition (`requests_p20261129`) before writing into it, and retention drops
  every partition whose day ended before the cut-off -- a catalogue operation, no dead tuples,
  no index bloat, no VACUUM.
- SQLite has no partitions. Retention deletes every row before the end of the last whole day
  past the cut-off, the same rows as dropping those days' partitions, in short transactions of
  a few thousand rows, oldest first, with pauses between them (`gateway.ledger.sweep`), so a
  writer waits one of them at most, never the whole day. Each is a range scan of the primary
  key (time leads it); freed pages go back to SQLite's free list and are reused (there is no
  MVCC bloat); when they are over half the file, `PRAGMA incremental_vacuum` returns them to the
  file system, a bounded number a transaction, on databases made with auto_vacuum=INCREMENTAL.

Either way a row lives until the whole day it belongs to is older than the retention, i.e. up to
one day longer than `retention_days`.

Writes go through `gateway.ledger.spool.RecordQueue`, which batches them on a background thread and
spools to disk while the database is unreachable. Inserts ignore rows already present, so a
replay that repeats a batch is harmless.
"""

from __future__ import annotations

import json
import logging
import threading
import time as _time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gateway.config import Config
from gateway.ledger import retention, rollups, sweep
from gateway.ledger.content import Content as Content
from gateway.ledger.content import capped as capped
from gateway.ledger.cost import Usage
from gateway.ledger.database import create_engine, migrate, resolve_url, writing
from gateway.ledger.fast_row import row_of, values_of
from gateway.ledger.partitions import DAY, PARTITIONS, day_start, partition_day, partition_ddl
from gateway.ledger.queries import intervals_query
from gateway.ledger.record import Record
from gateway.ledger.rows import (
    CONTENTS,
    DECISIONS,
    DEMOTIONS,
    EVAL_RESULTS,
    REQUESTS,
    ROUNDS,
    SHADOW_USAGE,
)

log = logging.getLogger(__name__)
# The PostgreSQL advisory lock that makes claiming a round one gateway at a time ("plum").
ROUND_LOCK = 0x706C756D


def record_row(record: Record) -> dict[str, Any]:
    """A record as a `requests` row: JSON-serialisable, attempts as JSON text, every value of
    its column's type (`gateway.ledger.fast_row.row_of`)."""
    return row_of(record)


class Store:
    """The tables behind one URL: write batches, drop old days, answer the report's queries."""

    def __init__(
        self,
        url: str,
        *,
        root: Path | None = None,
        busy_timeout_s: float = 5.0,
        run_migrations: bool = True,
    ) -> None:
        self.url = resolve_url(url, root)
        self.engine = create_engine(self.url, busy_timeout_s)
        self.postgres = self.engine.dialect.name == "postgresql"
        self._inserts: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._days: set[tuple[str, int]] = set()
        self.closing = threading.Event()  # ends a retention sweep in progress (SQLite)
        if run_migrations:
            migrate(self.engine)

    @classmethod
    def from_config(cls, config: Config, **kw: Any) -> Store:
        return cls(config.store.url, root=config.root, **kw)

    def close(self) -> None:
        self.closing.set()
        self.engine.dispose()

    # -- writing ---------------------------------------------------------------------------

    def write(
        self, rows: Sequence[dict[str, Any]], contents: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Insert a batch in one transaction; rows already present are left alone. Late rows
        mark their buckets dirty for the rollups (`gateway.ledger.rollups.late_buckets`)."""
        if not rows and not contents:
            return
        if self.postgres:
            self._ensure_partitions("requests", (r["time"] for r in rows))
            self._ensure_partitions("contents", (c["time"] for c in contents))
        with writing(self.engine) as conn:
            for table, batch in ((REQUESTS, rows), (CONTENTS, contents)):
                if batch:
                    sql, columns = self._insert_sql(table)
                    conn.exec_driver_sql(sql, values_of(batch, columns))
            rollups.mark_late(conn, rows, _time.time())

    def _insert_sql(self, table: sa.Table) -> tuple[str, tuple[str, ...]]:
        """A plain `INSERT … ON CONFLICT DO NOTHING` for the driver's executemany. Every column
        is a scalar the drivers adapt themselves, so SQLAlchemy's per-row parameter processing
        (a cost per row, on the store thread) buys nothing here."""
        cached = self._inserts.get(table.name)
        if cached is None:
            columns = tuple(c.name for c in table.columns)
            mark = "%s" if self.postgres else "?"
            sql = (
                f"INSERT INTO {table.name} ({', '.join(columns)}) "
                f"VALUES ({', '.join([mark] * len(columns))}) ON CONFLICT DO NOTHING"
            )
            cached = self._inserts[table.name] = (sql, columns)
        return cached

    def _ensure_partitions(self, table: str, times: Iterable[float]) -> None:
        known = {d for tb, d in self._days if tb == table}
        for day in sorted({day_start(t) for t in times} - known):
            try:
                with writing(self.engine) as conn:
                    conn.execute(partition_ddl(table, day))
            except sa.exc.IntegrityError:  # another gateway created it at the same moment
                pass
            self._days.add((table, day))

    # -- several gateways on one store ---------------------------------------------------------

    def claim_round(self, now: float, interval_s: float, gateway: str) -> bool:
        """Whether `gateway` runs the scheduled eval round now. True (and the round recorded)
        when no gateway has started one in the last `interval_s`. Claims are taken one at a
        time (SQLite's write lock, a PostgreSQL advisory lock), so of several gateways asking
        at once exactly one gets it."""
        with writing(self.engine) as conn:
            if self.postgres:
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": ROUND_LOCK})
            last = conn.execute(sa.select(sa.func.max(ROUNDS.c.started))).scalar()
            if last is not None and now - last < interval_s:
                return False
            conn.execute(ROUNDS.insert().values(started=now, gateway=gateway))
            return True

    def finish_round(
        self, started: float, now: float, outcome: str = "ok", error: tuple[str, str] | None = None
    ) -> None:
        """The round claimed at `started` ended at `now`: `outcome` ok | failed, a failed
        one's (error class, redacted message)."""
        error_class, message = error if error is not None else (None, None)
        with writing(self.engine) as conn:
            conn.execute(
                ROUNDS.update()
                .where(ROUNDS.c.started == started)
                .values(finished=now, outcome=outcome, error_class=error_class, error=message)
            )

    def _insert_new(self, table: sa.Table) -> Any:
        """An INSERT that leaves rows already present alone (ON CONFLICT DO NOTHING)."""
        return (postgresql if self.postgres else sqlite).insert(table).on_conflict_do_nothing()

    def shadow_reserve(
        self,
        model: str,
        day: int,
        max_requests: int | None,
        max_usd: float | None,
        hold_usd: float = 0.0,
    ) -> bool:
        """Count one more shadow request against `model`'s budget for UTC `day`, and hold
        `hold_usd` (the most it can cost) of its USD, if the budget allows: under `max_requests`,
        and the hold within `max_usd` (with nothing to hold: under it). One conditional UPDATE,
        so gateways reserving at once never overshoot either limit. `shadow_spent` settles."""
        t = SHADOW_USAGE
        fresh = {"model": model, "day": day, "requests": 0, "usd": 0.0}
        allowed = [t.c.model == model, t.c.day == day]
        if max_requests is not None:
            allowed.append(t.c.requests + 1 <= max_requests)
        if max_usd is not None:
            allowed.append(t.c.usd + hold_usd <= max_usd if hold_usd > 0 else t.c.usd < max_usd)
        taking = {"requests": t.c.requests + 1, "usd": t.c.usd + hold_usd}
        with writing(self.engine) as conn:
            conn.execute(self._insert_new(t).values(**fresh))
            taken = conn.execute(t.update().where(*allowed).values(**taking))
            return taken.rowcount == 1

    def shadow_spent(self, model: str, day: int, usd: float) -> None:
        """Add `usd` to `model`'s usage for UTC `day`: what a finished shadow request cost,
        less what its reservation held (so it may be negative)."""
        t = SHADOW_USAGE
        with writing(self.engine) as conn:
            conn.execute(
                t.update().where(t.c.model == model, t.c.day == day).values(usd=t.c.usd + usd)
            )

    def write_eval_results(self, results: Sequence[dict[str, Any]], time: float) -> None:
        """Keep a run's scored items (`ItemResult.to_dict()`); items already kept are left."""
        t = EVAL_RESULTS
        rows = [
            {
                "run": r["run"],
                "target": r["target"],
                "item_digest": r["item_digest"],
                "time": time,
                "result": json.dumps(r),
            }
            for r in results
        ]
        if not rows:
            return
        with writing(self.engine) as conn:
            conn.execute(self._insert_new(t), rows)

    def eval_results(self, runs: Sequence[str]) -> list[dict[str, Any]]:
        """The kept items of these runs, in the order they were kept."""
        t = EVAL_RESULTS
        query = sa.select(t.c.result).where(t.c.run.in_(list(runs))).order_by(t.c.time, t.c.run)
        with self.engine.connect() as conn:
            return [json.loads(r) for (r,) in conn.execute(query)]

    def share_demotions(self, gateway: str, demoted: dict[str, list[str]], now: float) -> None:
        """This gateway's demotions as they stand (upstream -> tripped checks): its rows are
        replaced, each refreshed to `now`; an upstream it restored loses its row."""
        t = DEMOTIONS
        rows = [
            {"upstream": u, "gateway": gateway, "checks": ",".join(c), "refreshed": now}
            for u, c in sorted(demoted.items())
        ]
        with writing(self.engine) as conn:
            conn.execute(t.delete().where(t.c.gateway == gateway))
            if rows:
                conn.execute(t.insert(), rows)

    def demotions(self, since: float) -> dict[str, dict[str, list[str]]]:
        """Upstream -> {gateway: tripped checks}, of the rows refreshed since `since` (a
        gateway that stopped refreshing, or is gone, no longer demotes)."""
        t = DEMOTIONS
        query = sa.select(t.c.upstream, t.c.gateway, t.c.checks).where(t.c.refreshed >= since)
        out: dict[str, dict[str, list[str]]] = {}
        with self.engine.connect() as conn:
            for upstream, gateway, checks in conn.execute(query):
                out.setdefault(upstream, {})[gateway] = checks.split(",") if checks else []
        return out

    def record_decision(self, model: str, time: float, decision: dict[str, Any]) -> None:
        with writing(self.engine) as conn:
            conn.execute(
                DECISIONS.insert().values(model=model, time=time, decision=json.dumps(decision))
            )

    def decisions(self, history: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the latest decision per model, the newest `history` decisions oldest first)."""
        t = DECISIONS
        newest = (
            sa.select(t.c.model, sa.func.max(t.c.time).label("time")).group_by(t.c.model).subquery()
        )
        latest_q = sa.select(t.c.model, t.c.decision).join(
            newest, sa.and_(t.c.model == newest.c.model, t.c.time == newest.c.time)
        )
        recent_q = sa.select(t.c.decision).order_by(t.c.time.desc()).limit(history)
        with self.engine.connect() as conn:
            latest = {m: json.loads(d) for m, d in conn.execute(latest_q)}
            recent = [json.loads(d) for (d,) in conn.execute(recent_q)]
        return latest, recent[::-1]

    # -- retention -------------------------------------------------------------------------

    def drop_before(self, table: str, cutoff: float) -> int:
        """Drop every whole day of `table` that ended by `cutoff`; returns the days dropped."""
        if table not in ("requests", "contents"):
            raise ValueError(table)
        if self.postgres:
            return self._drop_partitions(table, cutoff)
        return self._delete_days(table, cutoff)

    # Drop what is past its retention: days of records and contents, refusals, rollups (kept
    # longer with `rollup_retention_days`), stored responses.
    apply_retention = retention.apply

    def _drop_partitions(self, table: str, cutoff: float) -> int:
        with writing(self.engine) as conn:
            names = [r[0] for r in conn.execute(PARTITIONS, {"parent": table})]
        dropped = 0
        for name in sorted(names):
            day = partition_day(name)
            if day is None or day + DAY > cutoff:
                continue
            with writing(self.engine) as conn:
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))
            self._days.discard((table, day))
            dropped += 1
        return dropped

    def _delete_days(self, table: str, cutoff: float) -> int:
        return sweep.delete_days(self.engine, table, cutoff, stop=self.closing)

    # -- queries ---------------------------------------------------------------------------

    def count(self, table: str = "requests") -> int:
        t = REQUESTS if table == "requests" else CONTENTS
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)

    def get(self, request_id: str) -> dict[str, Any] | None:
        """One request row as a dict (attempts decoded), for tests and inspection."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(REQUESTS).where(REQUESTS.c.request_id == request_id)
            ).first()
        if row is None:
            return None
        out = dict(row._mapping)
        out["attempts"] = json.loads(out["attempts"])
        return out

    def usage(self, since: float, until: float | None = None) -> list[Usage]:
        """Per (model, upstream) totals of requests that started in [since, until): the
        rollups' whole buckets and raw rows at the ends (`gateway.ledger.rollups`)."""
        until = _time.time() if until is None else until
        with self.engine.connect() as conn:
            return rollups.usage(conn, since, until)

    def roll_up(self, config: Config, now: float | None = None, max_hours: int = 6) -> int:
        """Bring the 5-minute rollups up to date, at most `max_hours` of buckets (housekeeping's
        thread; `gateway.ledger.upkeep` in a child); returns the buckets rolled up."""
        now = _time.time() if now is None else now
        most = max_hours * rollups.CHUNK
        return rollups.roll_up(self.engine, rollups.node_upstreams(config), now, most)

    def intervals(
        self, upstreams: Sequence[str], since: float, until: float | None = None
    ) -> Iterator[tuple[float, float]]:
        """(start, end) of every request to `upstreams` in the window, clipped to it."""
        if not upstreams:
            return
        query = intervals_query(upstreams, since, until)
        end_cap = _time.time() if until is None else until
        with self.engine.connect() as conn:
            for start, e2e in conn.execution_options(yield_per=5000).execute(query):
                yield start, min(start + e2e, end_cap)

    def node_hours(
        self, config: Config, since: float, until: float | None = None, edges: bool = True
    ) -> dict[str, float]:
        """Busy hours of each configured node: the union of its upstreams' request intervals,
        computed in the database (`busy_seconds_query`, rolled up per 5 minutes); `edges=False`
        reads the rolled-up buckets only (`rollups.busy_seconds`)."""
        end_cap = _time.time() if until is None else until
        with self.engine.connect() as conn:
            return {
                node: rollups.busy_seconds(conn, node, ups, since, end_cap, edges) / 3600.0
                for node, ups in rollups.node_upstreams(config).items()
            }

    def settled_span(self, window_s: float, now: float | None = None) -> tuple[float, float] | None:
        """The last `window_s` of rolled-up 5-minute buckets, or None (`rollups.settled_span`)."""
        now = _time.time() if now is None else now
        with self.engine.connect() as conn:
            return rollups.settled_span(conn, window_s, now)
