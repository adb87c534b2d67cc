"""A record's typed row, on the request path: `typed_row`'s answer at a tenth of its cost.

`gateway.ledger.columns.typed_row` checks each of the ~50 values against its column in a loop
of generic checks: some 40 µs a record, paid twice a stream on the event loop (its start and its
end go to the journal, `gateway.ledger.spool.RecordQueue`). Nearly every record the gateway
makes is already right. `row_of` reads the record's fields in one function generated from the
columns at import (each value's check written out inline: its type, a PostgreSQL INTEGER's
range, a VARCHAR's length, no NUL, a finite float) and returns that row when every check
passes; the first value that does not pass sends the record to `typed_row`, which replaces it
and names it in `coerced` as always. So the row is `typed_row`'s in every case (the tests hold
them equal over odd values), and only its cost changed.

The attempts become JSON text by orjson from the `Attempt` dataclasses directly (NaN and
infinity as null, as `typed_row` writes them); a value orjson cannot write sends the record to
`typed_row` too. `values_of` turns rows into the store's executemany values, on the record
queue's thread.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from gateway.ledger.columns import COLUMNS, INT_MAX, INT_MIN, Column, typed_row
from gateway.ledger.record import _ROW_FIELDS, Record

_INF = float("inf")


def _check(col: Column, v: str) -> str:
    """A Python expression, true when the value named `v` passes `typed_row` unchanged."""
    if col.kind is bool:
        ok = f"type({v}) is bool"
    elif col.kind is int:
        ok = f"(type({v}) is int and {INT_MIN} <= {v} <= {INT_MAX})"
    elif col.kind is float:
        ok = f"(type({v}) is float and -_INF < {v} < _INF)"  # NaN fails both
    else:
        ok = f"(type({v}) is str and '\\x00' not in {v}"
        ok += f" and len({v}) <= {col.length})" if col.length is not None else ")"
    return f"({v} is None or {ok})" if col.nullable else ok


def _compile() -> Callable[[Record], dict[str, Any] | None]:
    """`fast(record)`: its row when every value is already right, else None."""
    by_name = {c.name: c for c in COLUMNS}
    names = [n for n in _ROW_FIELDS if n != "attempts"]
    lines = ["def fast(r):"]
    lines += [f"    v{i} = r.{n}" for i, n in enumerate(names)]
    checks = " and\n        ".join(_check(by_name[n], f"v{i}") for i, n in enumerate(names))
    lines.append(f"    if not (\n        {checks}\n    ):\n        return None")
    lines.append("    try:\n        attempts = _dumps(r.attempts).decode()")
    lines.append("    except _Error:\n        return None")
    values = {n: f"v{names.index(n)}" if n != "attempts" else "attempts" for n in _ROW_FIELDS}
    lines.append("    return {" + ", ".join(f"{n!r}: {values[n]}" for n in _ROW_FIELDS) + "}")
    scope: dict[str, Any] = {"_INF": _INF, "_dumps": orjson.dumps, "_Error": TypeError}
    exec(compile("\n".join(lines), f"<{__name__}>", "exec"), scope)  # noqa: S102 - our own
    fast: Callable[[Record], dict[str, Any] | None] = scope["fast"]
    return fast


_fast = _compile()


def row_of(record: Record) -> dict[str, Any]:
    """The record's `requests` row, exactly `typed_row(record)` (see the module's note)."""
    row = _fast(record)
    return typed_row(record) if row is None else row


def values_of(rows: Sequence[dict[str, Any]], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """Each row's values in `columns`' order, for the store's executemany; a missing one as None
    (a row spooled by an older gateway). One `itemgetter` call a row: the record queue's thread
    holds the GIL for this loop, and the event loop waits on it meanwhile (a tuple built from
    `dict.get` a column took five times as long)."""
    get = operator.itemgetter(*columns)
    try:
        return [get(r) for r in rows]
    except KeyError:
        return [tuple(r.get(c) for c in columns) for r in rows]
