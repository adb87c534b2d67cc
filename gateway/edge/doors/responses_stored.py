"""Stored responses over HTTP, as OpenAI serves them: `GET /v1/responses/{id}`,
`DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items` (a list page: `after`,
`limit` 1-100 (20), `order` asc | desc (desc)). A response another key stored, one stored with
`store: false` (never stored) or one past the retention is a 404.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.doors.response_state import NotFound, engine_of, in_thread, namespace
from gateway.errors import BadRequest
from gateway.ledger import responses_store

router = APIRouter()


def _json(doc: Any) -> Response:
    return Response(orjson.dumps(doc), media_type="application/json")


async def _stored(request: Request, rid: str) -> tuple[Any, responses_store.Stored]:
    engine = engine_of(request.app.state.gateway)
    stored = None
    if engine is not None:
        stored = await in_thread(responses_store.load, engine, rid, namespace(), "responses")
    if stored is None:
        raise NotFound(f"Response with id '{rid}' not found.")
    return engine, stored


@router.get("/v1/responses/{rid}")
async def get_response(request: Request, rid: str) -> Response:
    _, stored = await _stored(request, rid)
    return _json(stored.body)


@router.delete("/v1/responses/{rid}")
async def delete_response(request: Request, rid: str) -> Response:
    engine = engine_of(request.app.state.gateway)
    gone = engine is not None and await in_thread(responses_store.delete, engine, rid, namespace())
    if not gone:
        raise NotFound(f"Response with id '{rid}' not found.")
    return _json({"id": rid, "object": "response.deleted", "deleted": True})


def page(items: list[dict[str, Any]], after: str | None, limit: int, order: str) -> dict[str, Any]:
    """One page of a list in OpenAI's shape, `after` an item id of the previous page."""
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [i.get("id") for i in ordered]
        if after not in ids:
            raise BadRequest(f"No input item has the id {after!r}.", param="after")
        start = ids.index(after) + 1
    data = ordered[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": start + limit < len(ordered),
    }


@router.get("/v1/responses/{rid}/input_items")
async def list_input_items(
    request: Request, rid: str, after: str | None = None, limit: int = 20, order: str = "desc"
) -> Response:
    if not 1 <= limit <= 100:
        raise BadRequest("'limit' must be between 1 and 100.", param="limit")
    if order not in ("asc", "desc"):
        raise BadRequest("'order' must be 'asc' or 'desc'.", param="order")
    engine, stored = await _stored(request, rid)
    items = await in_thread(responses_store.items, engine, stored.id, "input")
    return _json(page(items, after, limit, order))
