"""One row of the edge's request table (`gateway/edge/table.py`): method, path, handler, models.

A handler takes the request (and, for the admin and console routes, what FastAPI injects: path
and query parameters, the admin dependency) and returns a `Response`. `body` is the request's
model: the handler validates the parsed body itself (`read_json` and a `check`), the schema
documents it (inlined, so a fuzzer can generate from it). `answer` is the response's model, where
one is documented. A `generation` route is one of the generation endpoints: the edge serves its
`POST` before Starlette's stack (`gateway/edge/fastpath.py`), and the access guard checks the
key's models and budget on it (`gateway/edge/guard.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import params
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.responses import Response

JSON = "application/json"

Handler = Callable[..., Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    body: type[BaseModel] | None = None
    answer: type[BaseModel] | None = None
    generation: bool = False
    schema: bool = True  # in /openapi.json
    also: tuple[str, ...] = ()  # further methods it answers the same way (HEAD)
    depends: Sequence[params.Depends] = field(default=())

    @property
    def methods(self) -> list[str]:
        return [self.method, *self.also]

    def api_route(self) -> APIRoute:
        """The route as FastAPI's router holds it: served there (all but a generation route's
        `POST`, which the edge takes first) and documented in the schema from there."""
        responses: dict[int | str, dict[str, Any]] = {}
        if self.answer is not None:
            responses[200] = {"content": {JSON: {"schema": inlined(self.answer)}}}
        return APIRoute(
            self.path,
            self.handler,
            methods=self.methods,
            openapi_extra=request_body(self.body) if self.body is not None else None,
            responses=responses or None,
            include_in_schema=self.schema,
            dependencies=self.depends,
        )


def inlined(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` inlined (the models are not recursive)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.rsplit("/", 1)[1]])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` documenting a body the handler parses itself."""
    return {"requestBody": {"required": True, "content": {JSON: {"schema": inlined(model)}}}}
