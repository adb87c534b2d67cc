"""Checking a door's body against its wire model, with errors a person can act on.

Pydantic reports a bad member of a union once per union branch and names the branches in the
location (`content.str`, `content.list[tagged-union[…]].0.text.text`); `check_model` reports the
deepest error — the branch the client meant — at its place in the body (`content.0.text`), as
`gateway.errors.describe` words it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.errors import BadRequest, describe

M = TypeVar("M", bound=BaseModel)


def check_model(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        message, param = describe(e.errors(), body)
        raise BadRequest(message, param=param) from None
