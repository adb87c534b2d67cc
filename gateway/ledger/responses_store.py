"""Stored responses: the Responses door's `store`, and the Messages door's threads.

A stored response is one `stored_responses` row (the response object as JSON, or for the Messages
door a thread's state) under the key that made it, and its items in order in `stored_items`: the
input items it was answered from (the conversation before it included, so a continuation needs
one read) and its output items. Every read and delete names the key: a response stored under
one key is not found under another ('' is the namespace of a gateway with no keys). Expired
rows are purged row by row by `purge` (the hourly retention), in short transactions: the table
is small next to `requests`, and not partitioned.

The functions take an engine and run in the caller's thread (the edge calls them off the event
loop). Nothing here knows HTTP: `gateway/edge/doors/response_state.py` is the door's side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gateway.ledger.database import writing
from gateway.ledger.rows import STORED_ITEMS, STORED_RESPONSES
from gateway.ledger.sweep import chunked


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored response (or thread) as read back."""

    id: str
    door: str
    created: float
    body: dict[str, Any]


def save(
    engine: Engine,
    *,
    rid: str,
    key_id: str,
    door: str,
    created: float,
    body: dict[str, Any],
    inputs: Sequence[dict[str, Any]] = (),
    outputs: Sequence[dict[str, Any]] = (),
) -> None:
    """Store one response (replacing one of the same id) and its items, in one transaction."""
    items = [("input", i) for i in inputs] + [("output", o) for o in outputs]
    rows = [
        {
            "response_id": rid,
            "position": n,
            "item_id": str(item.get("id") or ""),
            "source": source,
            "item": json.dumps(item),
        }
        for n, (source, item) in enumerate(items)
    ]
    with writing(engine) as conn:
        conn.execute(sa.delete(STORED_ITEMS).where(STORED_ITEMS.c.response_id == rid))
        conn.execute(sa.delete(STORED_RESPONSES).where(STORED_RESPONSES.c.id == rid))
        conn.execute(
            sa.insert(STORED_RESPONSES),
            [
                {
                    "id": rid,
                    "key_id": key_id,
                    "door": door,
                    "created": created,
                    "body": json.dumps(body),
                }
            ],
        )
        if rows:
            conn.execute(sa.insert(STORED_ITEMS), rows)


def load(engine: Engine, rid: str, key_id: str, door: str | None = None) -> Stored | None:
    """The response `rid` stored under `key_id` (of `door`, if given), or None."""
    t = STORED_RESPONSES
    query = sa.select(t.c.id, t.c.door, t.c.created, t.c.body).where(
        t.c.id == rid, t.c.key_id == key_id
    )
    if door is not None:
        query = query.where(t.c.door == door)
    with engine.connect() as conn:
        row = conn.execute(query).first()
    return None if row is None else Stored(row[0], row[1], row[2], json.loads(row[3]))


def items(engine: Engine, rid: str, source: str | None = None) -> list[dict[str, Any]]:
    """The items of response `rid` in order (only its `input` or `output` ones, if given).
    The caller has checked the response is the key's (`load`)."""
    t = STORED_ITEMS
    query = sa.select(t.c.item).where(t.c.response_id == rid).order_by(t.c.position)
    if source is not None:
        query = query.where(t.c.source == source)
    with engine.connect() as conn:
        return [json.loads(r[0]) for r in conn.execute(query)]


def item(engine: Engine, item_id: str, key_id: str) -> dict[str, Any] | None:
    """The newest stored item of id `item_id` among the key's responses, or None."""
    i, r = STORED_ITEMS, STORED_RESPONSES
    query = (
        sa.select(i.c.item)
        .join(r, r.c.id == i.c.response_id)
        .where(i.c.item_id == item_id, r.c.key_id == key_id)
        .order_by(r.c.created.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    return None if row is None else json.loads(row[0])


def delete(engine: Engine, rid: str, key_id: str) -> bool:
    """Delete the key's response `rid` and its items; whether there was one."""
    t = STORED_RESPONSES
    with writing(engine) as conn:
        gone = conn.execute(sa.delete(t).where(t.c.id == rid, t.c.key_id == key_id)).rowcount
        if gone:
            conn.execute(sa.delete(STORED_ITEMS).where(STORED_ITEMS.c.response_id == rid))
    return bool(gone)


def purge(engine: Engine, cutoff: float) -> int:
    """Delete every response stored before `cutoff` (epoch seconds) and its items, a bounded
    number of responses a transaction (`gateway.ledger.sweep.chunked`: SQLite's writers wait
    one of them at most); how many."""
    t = STORED_RESPONSES

    def step(conn: Connection, n: int) -> int:
        old = conn.execute(
            sa.select(t.c.id).where(t.c.created < cutoff).order_by(t.c.created).limit(n)
        )
        ids = [i for (i,) in old]
        if ids:
            conn.execute(sa.delete(STORED_ITEMS).where(STORED_ITEMS.c.response_id.in_(ids)))
            conn.execute(sa.delete(t).where(t.c.id.in_(ids)))
        return len(ids)

    return chunked(engine, step)
