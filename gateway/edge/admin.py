"""Admin routes: key management, config reload and reports — for admin keys only.

`AccessGuard` lets only `admin` keys reach /admin; every route here checks it again (the role the
guard put in the request state), so a gateway wired without the guard refuses instead of opening.

    GET    /admin/keys             every key (config and store), never a hash or a plaintext
    POST   /admin/keys             create a store key; the answer holds its plaintext, once
    DELETE /admin/keys/{id}        revoke a store key
    POST   /admin/reload           re-read the config file's [access] section
    GET    /admin/report?since=24h the cost report as JSON

No route touches the store on the event loop: keys go through `Access`'s own database threads
(as its checks do), the report to a thread. There a key's write would wait for the store's
lock, and a report would scan the store, while every request waited with it.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import orjson
import sqlalchemy as sa
from fastapi import Depends
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import ConfigError, Name, default_config_path, load_config
from gateway.edge.access import Access
from gateway.edge.doors.openai.protocol import validate
from gateway.edge.route import Route
from gateway.errors import BadRequest, Conflict, Forbidden, Unauthorized

JSON = "application/json"


def require_admin(request: Request) -> Access:
    if request.scope.get("state", {}).get("key_role") != "admin":
        raise Unauthorized("Admin routes need an admin API key.")
    access: Access | None = getattr(request.app.state, "access", None)
    if access is None:
        raise Forbidden("Access control is not enabled on this gateway.")
    return access


AdminAccess = Annotated[Access, Depends(require_admin)]


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Name
    role: Literal["client", "admin", "metrics", "console"] = "client"
    models: list[Name] | None = None
    requests_per_window: int | None = Field(None, ge=1)
    tokens_per_window: int | None = Field(None, ge=1)
    window_s: float = Field(60.0, gt=0, le=86_400 * 31)


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON)


async def list_keys(access: AdminAccess) -> Response:
    return _json({"object": "list", "data": await access.list_keys()})


async def create_key(request: Request, access: AdminAccess) -> Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"The request body is not valid JSON: {e}") from None
    spec = validate(NewKey, body)
    if not access.config.store_keys:
        raise Conflict("Store keys are off: set [access] store_keys = true to create keys here.")
    gw = getattr(request.app.state, "gateway", None)
    if gw is not None and spec.models and (unknown := set(spec.models) - set(gw.config.models)):
        raise BadRequest(f"Unknown models: {', '.join(sorted(unknown))}", param="models")
    try:
        plaintext = await access.create_key(
            spec.id,
            role=spec.role,
            models=spec.models,
            requests_per_window=spec.requests_per_window,
            tokens_per_window=spec.tokens_per_window,
            window_s=spec.window_s,
        )
    except sa.exc.IntegrityError:
        raise Conflict(f"A key with id {spec.id!r} exists already.", param="id") from None
    return _json(
        {
            **spec.model_dump(),
            "key": plaintext,
            "note": "This is the only time the key is shown; the gateway keeps its hash.",
        },
        status=201,
    )


async def revoke_key(key_id: str, access: AdminAccess) -> Response:
    if not await access.revoke_key(key_id):
        raise BadRequest(f"No active store key has the id {key_id!r}.", param="key_id")
    return _json({"id": key_id, "revoked": True})


async def reload(request: Request, access: AdminAccess) -> Response:
    path = getattr(request.app.state, "config_path", None) or default_config_path()
    try:
        config = load_config(path)
    except ConfigError as e:
        raise BadRequest(f"The config was not reloaded: {e}") from None
    access.reload(config.access)
    return _json({"reloaded": "access", "keys": len(config.access.keys)})


async def report(request: Request, access: AdminAccess, since: str = "24h") -> Response:
    from gateway.reports.cost import report_cost

    gw = request.app.state.gateway
    try:
        text = await asyncio.to_thread(
            report_cost, gw.config, since, "json", store=getattr(gw, "store", None)
        )
    except ValueError as e:
        raise BadRequest(str(e), param="since") from None
    return Response(text, media_type=JSON)


# Each handler takes `AdminAccess` too: the guard's check, made again (`require_admin`).
ROUTES = (
    Route("GET", "/admin/keys", list_keys, depends=(Depends(require_admin),)),
    Route("POST", "/admin/keys", create_key, body=NewKey, depends=(Depends(require_admin),)),
    Route("DELETE", "/admin/keys/{key_id}", revoke_key, depends=(Depends(require_admin),)),
    Route("POST", "/admin/reload", reload, depends=(Depends(require_admin),)),
    Route("GET", "/admin/report", report, depends=(Depends(require_admin),)),
)
