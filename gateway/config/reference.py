"""The configuration reference (docs/configuration.md), written from the config models.

Every table and key of `config.toml` is a field of `gateway.config.Config` or of a model under
it; the comment lines above a field (and a comment at the end of its line) are its meaning, the
class docstring is its table's. Walking the models gives the reference, so the page cannot drift
from what the loader accepts: `tests/gateway/config/test_reference.py` compares the committed
page with this output.

    python -m gateway.config.reference > docs/configuration.md
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gateway.config.tree import Config

_FIELD = re.compile(r"^    (\w+)\s*:")
_BOUNDS = {
    annotated_types.Ge: ">=",
    annotated_types.Gt: ">",
    annotated_types.Le: "<=",
    annotated_types.Lt: "<",
}


@dataclass(frozen=True)
class Table:
    """One TOML table: its header, what it is, and its plain keys."""

    header: str
    about: str
    keys: list[tuple[str, str, str, str]]  # (key, type, default, meaning)


@cache
def comments(cls: type) -> dict[str, str]:
    """Each field's comment lines (above it, and at the end of its line) in `cls`'s source."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: list[str] = []
    previous = ""  # the field on the line before, when nothing stood between them
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#") and line.startswith("    ") and not line.startswith("     "):
            pending.append(stripped.lstrip("#").strip())
            previous = ""
            continue
        match = _FIELD.match(line)
        if match:
            tail = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join([*pending, tail]).strip()
            if not text and previous and out.get(previous):
                text = f"See `{previous}`."  # a field grouped under the one above it
            out[match.group(1)] = text
            previous = match.group(1)
        elif not stripped or not line.startswith("        "):
            previous = ""  # a blank line or another statement ends a group
        pending = []
    return out


def _unwrap(annotation: Any) -> Any:
    """`X | None` as X; Annotated[X, ...] as X."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return annotation


def _model(annotation: Any) -> type[BaseModel] | None:
    a = _unwrap(annotation)
    return a if isinstance(a, type) and issubclass(a, BaseModel) else None


def type_name(annotation: Any) -> str:
    """A field's type as a reader wants it: `int`, `float | None`, `"a" | "b"`, `list[str]`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if annotation is type(None):
        return "none"
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    marks = []
    for m in field.metadata:
        for kind, sign in _BOUNDS.items():
            if isinstance(m, kind):
                marks.append(f"{sign} {getattr(m, sign_attr(kind))}")
        if isinstance(m, annotated_types.MinLen) and m.min_length:
            marks.append(f"at least {m.min_length}")
    return ", ".join(marks)


def sign_attr(kind: type) -> str:
    return {
        annotated_types.Ge: "ge",
        annotated_types.Gt: "gt",
        annotated_types.Le: "le",
        annotated_types.Lt: "lt",
    }[kind]


def default_of(field: FieldInfo) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return ""
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return shown_value(value)


def shown_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "unset"
    return f"`{value!r}`"


def tables(
    model: type[BaseModel],
    path: str = "",
    about: str = "",
    array: bool = False,
    instance: BaseModel | None = None,
) -> Iterator[Table]:
    """The model's own keys as one table, then each sub-table it holds, depth first. `path` is
    the dotted TOML path; `array` marks an array of tables (`[[upstreams]]`); `instance` is the
    parent's default for this table (each watchdog check has its own), whose values are then
    the keys' defaults."""
    notes = comments(model)
    keys, subs = [], []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        meaning = notes.get(name, "")
        inner = _unwrap(field.annotation)
        args = typing.get_args(inner)
        dotted = f"{path}.{name}".lstrip(".")
        grouped = "" if meaning.startswith("See `") else meaning  # tables carry their own
        if (sub := _model(inner)) is not None:
            own = field.default if isinstance(field.default, BaseModel) else None
            subs.append((dotted, sub, grouped, False, own))
        elif typing.get_origin(inner) is list and args and (sub := _model(args[0])):
            subs.append((dotted, sub, grouped, True, None))
        elif typing.get_origin(inner) is dict and len(args) == 2 and (sub := _model(args[1])):
            subs.append((f"{dotted}.NAME", sub, grouped, False, None))
        else:
            bounds = _bounds(field)
            shown = type_name(field.annotation) + (f" ({bounds})" if bounds else "")
            value = default_of(field) if instance is None else shown_value(getattr(instance, name))
            keys.append((name, shown, value, meaning))
    if path and (keys or not subs):
        header = f"[[{path}]]" if array else f"[{path}]"
        yield Table(header, about or own_doc(model), keys)
    for dotted, sub, meaning, is_array, default in subs:
        yield from tables(sub, dotted, meaning or own_doc(sub), is_array, default)


def own_doc(model: type) -> str:
    """The model's own docstring (not one inherited from pydantic's BaseModel)."""
    return inspect.cleandoc(model.__dict__.get("__doc__") or "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """docs/configuration.md."""
    out = [
        "# Configuration reference",
        "",
        "Written from the config models by `python -m gateway.config.reference` (do not edit by",
        "hand; a test fails when this page and the models disagree). `config.toml` at the",
        "repository root is the commented default. Unknown keys are errors, and a name that points",
        "nowhere stops the gateway at start with a message naming it. Secrets are never written in",
        "the file: a key is referenced by the name of the environment variable that holds it.",
        "",
    ]
    for table in tables(Config):
        out += [f"## `{table.header}`", ""]
        if table.about:
            out += [" ".join(table.about.split()), ""]
        if table.keys:
            out += ["| key | type | default | meaning |", "|---|---|---|---|"]
            out += [
                f"| `{k}` | {_cell(t)} | {_cell(d)} | {_cell(m)} |" for k, t, d, m in table.keys
            ]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
