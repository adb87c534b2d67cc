"""The database behind a store URL: the URL resolved, the engine (SQLite in WAL mode, or
PostgreSQL through psycopg 3), write transactions, and `migrate`, which applies the alembic
revisions in `gateway/ledger/migrations/` (no alembic.ini) that own every table.
"""

from __future__ import annotations

import contextlib
import threading
import time as _time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy.engine import Connection, Engine, make_url

# alembic keeps its running context in module state, so one migration at a time per process.
_ALEMBIC = threading.Lock()


def resolve_url(url: str, root: Path | None = None) -> sa.URL:
    """Relative sqlite paths against `root` (parent folders created); postgres URLs to psycopg 3."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        db = u.database
        if db and db != ":memory:" and not db.startswith("file:"):
            path = Path(db)
            if not path.is_absolute():
                path = (root or Path.cwd()) / path
            path.parent.mkdir(parents=True, exist_ok=True)
            u = u.set(database=str(path))
    elif u.get_backend_name() in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u


def create_engine(url: sa.URL, busy_timeout_s: float = 5.0) -> Engine:
    """An engine with SQLite in WAL mode (and a bounded wait on locks), or plain PostgreSQL."""
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            url, connect_args={"check_same_thread": False, "timeout": busy_timeout_s}
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new, empty file
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            cur.close()
            # Let SQLAlchemy, not the sqlite3 module, open transactions, so DDL is transactional
            # (a migration and its version stamp commit together) and writers can BEGIN IMMEDIATE.
            dbapi_conn.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('sqlite_begin', '')}")

        return engine
    return sa.create_engine(
        url, pool_pre_ping=True, connect_args={"connect_timeout": max(1, int(busy_timeout_s))}
    )


@contextlib.contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """A write transaction; on SQLite it takes the write lock up front (BEGIN IMMEDIATE), so a
    busy database makes it wait up to the busy timeout instead of failing half-way."""
    with engine.connect() as conn:
        conn.execution_options(sqlite_begin="IMMEDIATE")
        with conn.begin():
            yield conn


def migrate(engine: Engine, attempts: int = 3, revision: str = "head") -> None:
    """Bring the schema to `revision` (the newest by default).

    Serialised by an advisory lock on PostgreSQL. SQLite has none, so two processes starting at
    once may collide; the loser retries and then finds the schema current. Best run once before
    starting workers.
    """
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(resources.files("gateway.ledger") / "migrations"))
    for attempt in range(attempts):
        try:
            with _ALEMBIC, writing(engine) as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(7304117)"))
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
            return
        except sa.exc.DBAPIError:
            if attempt == attempts - 1 or engine.dialect.name != "sqlite":
                raise
            _time.sleep(0.2 * (attempt + 1))
