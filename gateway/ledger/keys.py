"""The `keys` and `key_usage` tables: the keys the admin API stored (by sha256 only) and the
fixed-window budget counters, shared by every gateway on one store.

A reservation is one conditional statement

    UPDATE key_usage SET requests = requests + 1, tokens = tokens + :t
    WHERE key_id = :k AND window_start = :w AND requests + 1 <= :rl AND tokens + :t <= :tl
    RETURNING requests

so concurrent reservations, in one process or in several gateways on one PostgreSQL store
(where the row lock re-checks the condition), never overshoot. The policy (which key, which
window, how many tokens) is `gateway.edge.access`'s; these are its queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from gateway.ledger.rows import KEY_USAGE, KEYS


def reserve(
    engine: Engine,
    key_id: str,
    window: int,
    tokens: int,
    limits: tuple[int | None, int | None],
    forget_before: int | None = None,
) -> bool:
    """Count one request and `tokens` against `key_id`'s `window` if both stay within `limits`
    (requests, tokens; None = no limit). A granted reservation with `forget_before` also drops
    the key's windows that started before it."""
    t = KEY_USAGE
    max_requests, max_tokens = limits
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    conds = [t.c.key_id == key_id, t.c.window_start == window]
    if max_requests is not None:
        conds.append(t.c.requests + 1 <= max_requests)
    if max_tokens is not None:
        conds.append(t.c.tokens + tokens <= max_tokens)
    update = (
        t.update()
        .where(*conds)
        .values(requests=t.c.requests + 1, tokens=t.c.tokens + tokens)
        .returning(t.c.requests)
    )
    with engine.begin() as conn:
        conn.execute(
            insert(t)
            .values(key_id=key_id, window_start=window, requests=0, tokens=0)
            .on_conflict_do_nothing()
        )
        granted = conn.execute(update).first() is not None
        if granted and forget_before is not None:
            conn.execute(t.delete().where(t.c.key_id == key_id, t.c.window_start < forget_before))
    return granted


def settle(engine: Engine, key_id: str, window: int, delta: int) -> None:
    """Add `delta` tokens (negative: give back) to a window's count, never below zero."""
    t = KEY_USAGE
    total = t.c.tokens + delta
    with engine.begin() as conn:
        conn.execute(
            t.update()
            .where(t.c.key_id == key_id, t.c.window_start == window)
            .values(tokens=sa.case((total < 0, 0), else_=total))
        )


def counted(engine: Engine, key_id: str, window: int) -> tuple[int, int]:
    """(requests, tokens) counted for a key in one window."""
    t = KEY_USAGE
    query = sa.select(t.c.requests, t.c.tokens).where(
        t.c.key_id == key_id, t.c.window_start == window
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    return (row[0], row[1]) if row else (0, 0)


def find(engine: Engine, digest: str) -> sa.RowMapping | None:
    """The unrevoked stored key whose sha256 is `digest`."""
    query = sa.select(KEYS).where(KEYS.c.sha256 == digest, KEYS.c.revoked.is_(None))
    with engine.connect() as conn:
        return conn.execute(query).mappings().first()


def insert(engine: Engine, row: Mapping[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(KEYS.insert().values(**row))


def revoke(engine: Engine, key_id: str, now: float) -> bool:
    """Mark a stored key revoked; False when there is no such unrevoked key."""
    with engine.begin() as conn:
        done = conn.execute(
            KEYS.update().where(KEYS.c.id == key_id, KEYS.c.revoked.is_(None)).values(revoked=now)
        ).rowcount
    return bool(done)


def stored(engine: Engine) -> list[sa.RowMapping]:
    """Every stored key, revoked ones too, oldest first."""
    with engine.connect() as conn:
        return list(conn.execute(sa.select(KEYS).order_by(KEYS.c.created)).mappings().all())
