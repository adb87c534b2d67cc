"""A record's values made into what the `requests` table's columns hold.

Every value a row carries is checked against its column (`gateway.ledger.rows.RequestRow`):
the Python type the drivers bind, the range of a PostgreSQL INTEGER, the length of a VARCHAR,
no NUL byte (PostgreSQL text refuses it), no NaN or infinity. A value that does not fit is not
stored raw: it becomes NULL (or the column's zero where NULL is not allowed), a string is cut to
its column's length, and the field is named in the row's `coerced` column as `field:what`
(`max_tokens:list`, `model:long`), so an odd value a client or an upstream sent is visible in
the ledger without ever failing the insert of the row (nor of its batch).

Values that are already right -- every value the gateway itself produces -- pass with one
`type()` check each; this runs once per record, on the request path (`RecordQueue.submit`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError

from gateway.ledger.record import Record
from gateway.ledger.rows import REQUESTS

INT_MIN, INT_MAX = -(2**31), 2**31 - 1  # PostgreSQL INTEGER (SQLite's is wider)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: type  # bool | int | float | str
    nullable: bool
    length: int | None  # a VARCHAR's; None for TEXT and numbers


def _kind(column: sa.Column[Any]) -> type:
    t = column.type
    if isinstance(t, sa.Boolean):
        return bool
    if isinstance(t, sa.Integer):
        return int
    if isinstance(t, sa.Float | sa.Numeric):
        return float
    return str


COLUMNS = tuple(
    Column(c.name, _kind(c), bool(c.nullable), getattr(c.type, "length", None))
    for c in REQUESTS.columns
)
_ZERO: dict[type, Any] = {bool: False, int: 0, float: 0.0, str: ""}


def typed_row(record: Record) -> dict[str, Any]:
    """The record as a `requests` row every driver binds: attempts as JSON text, each value of
    its column's type, the odd ones replaced and named in `coerced`."""
    row = record.as_row()
    row["attempts"] = _attempts(row["attempts"])
    notes: list[str] = []
    for col in COLUMNS:
        value = row.get(col.name)
        if value is None:
            if not col.nullable:
                row[col.name] = _ZERO[col.kind]
                notes.append(f"{col.name}:null")
            continue
        if col.kind is bool and type(value) is bool:
            continue  # the common cases: a bool, a finite float
        if col.kind is float and type(value) is float and math.isfinite(value):
            continue
        fixed, note = _FIT[col.kind](value, col)
        row[col.name] = fixed if fixed is not None or col.nullable else _ZERO[col.kind]
        if note:
            notes.append(f"{col.name}:{note}")
    if notes:
        given = row.get("coerced")
        row["coerced"] = ",".join(([given] if isinstance(given, str) and given else []) + notes)
    return row


def _what(value: Any) -> str:
    """A value's JSON-ish type name, for a note."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else "inf"
    return type(value).__name__


def _fit_int(value: Any, col: Column) -> tuple[Any, str | None]:
    if type(value) is int:
        if INT_MIN <= value <= INT_MAX:
            return value, None
        return (INT_MAX if value > 0 else INT_MIN), "huge"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return _fit_int(int(value), col)[0], "float"
    return None, _what(value)


def _fit_float(value: Any, col: Column) -> tuple[Any, str | None]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        f = float(value)
        return (f, None) if math.isfinite(f) else (None, _what(f))
    return None, _what(value)


def _fit_bool(value: Any, col: Column) -> tuple[Any, str | None]:
    return (bool(value), "int") if value in (0, 1) else (None, _what(value))


def _fit_str(value: Any, col: Column) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, _what(value)
    note = None
    if "\x00" in value:
        value, note = value.replace("\x00", ""), "nul"
    if col.length is not None and len(value) > col.length:
        value, note = value[: col.length], "long"
    return value, note


_FIT: dict[type, Callable[[Any, Column], tuple[Any, str | None]]] = {
    int: _fit_int,
    float: _fit_float,
    bool: _fit_bool,
    str: _fit_str,
}


def _attempts(attempts: list[dict[str, Any]]) -> str:
    """The attempts as JSON text; a value JSON cannot hold (NaN) is written as null."""
    clean = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in a.items()}
        for a in attempts
    ]
    try:  # as `gateway.ledger.fast_row` writes them
        return orjson.dumps(clean, default=str).decode()
    except TypeError:  # an int past 64 bits
        return json.dumps(clean, separators=(",", ":"), default=str)


def count_of(body: dict[str, Any], *fields: str) -> tuple[int | None, str | None]:
    """The first of `fields` the body sets, as a positive token count, and a note
    (`field:what`) when the value set is not one: a request's cap, for its record."""
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if type(value) is int and 0 < value <= INT_MAX:
            return value, None
        if isinstance(value, float) and value.is_integer() and 0 < value <= INT_MAX:
            return int(value), None
        if isinstance(value, str) and value.strip().isdigit() and 0 < int(value) <= INT_MAX:
            return int(value), None  # what pydantic's lax int takes, as the upstream will
        kind = "huge" if type(value) is int and value > INT_MAX else _what(value)
        return None, f"{name}:{kind}"
    return None, None


_BOOL = TypeAdapter(bool)


def flag_of(value: Any) -> tuple[bool, str | None]:
    """A request's `stream` as the doors' validation reads it (pydantic's lax bool: `"false"`,
    `0`, `"off"` are false), and a note when it is none of those (then false)."""
    if value is None or type(value) is bool:
        return bool(value), None
    try:
        return _BOOL.validate_python(value), None
    except ValidationError:
        return False, f"stream:{_what(value)}"
