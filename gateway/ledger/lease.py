"""Leases: which one of the processes on a store does a piece of shared work.

Every gateway process (each `--workers` worker, each gateway on a shared PostgreSQL) runs
housekeeping. Reading is per process, but the store's own upkeep (rolling up the hours,
dropping expired days) is the same work for all of them: done by one at a time, the holder of
the lease named for it. A lease is a row (`leases`: name, holder, until). `hold` takes it when
it is free, expired, or already the caller's, and extends it; a holder that dies lets it lapse
after its time to live, and the next process to ask takes it over.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gateway.ledger.database import writing
from gateway.ledger.rows import LEASES

LEASE_LOCK = 0x706C6C73  # the PostgreSQL advisory lock that serialises lease changes


def hold(engine: Engine, name: str, holder: str, now: float, ttl_s: float) -> bool:
    """Whether `holder` holds lease `name` until `now + ttl_s` (taken or extended now).

    Changes are taken one at a time (SQLite's write lock, a PostgreSQL advisory lock), so of
    several processes asking at once for a free lease exactly one gets it."""
    with writing(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LEASE_LOCK})
        row = conn.execute(
            sa.select(LEASES.c.holder, LEASES.c.until).where(LEASES.c.name == name)
        ).first()
        if row is None:
            conn.execute(LEASES.insert().values(name=name, holder=holder, until=now + ttl_s))
            return True
        if row.holder != holder and row.until > now:
            return False
        conn.execute(
            LEASES.update().where(LEASES.c.name == name).values(holder=holder, until=now + ttl_s)
        )
        return True


def holder(engine: Engine, name: str, now: float) -> str | None:
    """Who holds lease `name` now, if anyone."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(LEASES.c.holder, LEASES.c.until).where(LEASES.c.name == name)
        ).first()
    return None if row is None or row.until <= now else str(row.holder)


def release(engine: Engine, name: str, holder: str) -> None:
    """`holder` gives lease `name` up (a clean stop): the next to ask takes it at once."""
    with writing(engine) as conn:
        conn.execute(LEASES.delete().where(LEASES.c.name == name, LEASES.c.holder == holder))
