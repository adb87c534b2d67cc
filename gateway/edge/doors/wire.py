"""Checking a door's body against its wire model, with errors a person can act on.

Pydantic reports a bad member of a union once per union branch and names the branches in the
location (`content.str`, `content.list[tagged-union[…]].0.text.text`); `check_model` reports the
deepest error — the branch the client meant — at its place in the body (`content.0.text`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.errors import BadRequest

M = TypeVar("M", bound=BaseModel)


def _where(body: Any, loc: tuple[Any, ...]) -> str:
    """The location in the body: union branch labels (`str`, `list[…]`, a tag) left out."""
    parts: list[str] = []
    node = body
    tagged = None
    for i, p in enumerate(loc):
        if isinstance(p, str) and ("[" in p or p == "str"):
            continue
        if isinstance(node, dict) and node.get("type") == p and node is not tagged:
            tagged = node
            continue  # the tag of a discriminated union
        inside = isinstance(node, list) and isinstance(p, int) and p < len(node)
        if inside or (isinstance(node, dict) and p in node):
            node = node[p]
        elif i < len(loc) - 1:
            continue  # a tag naming the branch, not a place in the body
        else:
            node = None
        parts.append(str(p))
    return ".".join(parts)


def check_model(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        errors = e.errors()
        first = max(errors, key=lambda err: len(err["loc"]))
        where = _where(body, first["loc"])
        if first["type"] == "missing":
            message = f"'{where}' is required"
        elif where:
            message = f"Invalid value for '{where}': {first['msg']}"
        else:
            message = first["msg"]
        raise BadRequest(message, param=where or None) from None
