"""The console's routes: the page, its static files, the chart library and the panel JSON.

Every route sits under ``/console``, which the access guard opens to admin and console keys
only (a browser sends the key as the password of HTTP Basic auth; the guard's 401 asks for it).
The handlers are thin: what the panels show is `gateway.edge.console.panels`'.
"""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from gateway.edge.console import panels
from gateway.edge.route import Route
from gateway.edge.status import health_of
from gateway.errors import NotAnAsset

JSON = "application/json"
# The page's own files, shipped in the wheel beside this module.
ASSETS = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# The page never runs code from elsewhere, and nothing may frame it.
SECURITY = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _static(name: str) -> bytes:
    return resources.files("gateway.edge.console").joinpath("static", name).read_bytes()


def _json(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type=JSON, headers={"cache-control": "no-store"})


async def page(request: Request) -> Response:
    return Response(
        _static("console.html"), media_type="text/html; charset=utf-8", headers=SECURITY
    )


async def chart_library(request: Request) -> Response:
    """plotly.js as the installed `plotly` package ships it (no copy in this repository)."""
    body = await asyncio.to_thread(
        resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes
    )
    return Response(
        body,
        media_type="text/javascript; charset=utf-8",
        headers={"cache-control": "private, max-age=86400", "x-content-type-options": "nosniff"},
    )


async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotAnAsset(f"Unknown console asset: {name}")
    return Response(_static(name), media_type=ASSETS[name], headers=SECURITY)


async def upstreams(request: Request, window: str = "24h") -> Response:
    gw = request.app.state.gateway
    window = panels.window_of(window)
    health = health_of(gw)
    doc = await asyncio.to_thread(
        panels.upstreams, gw.config, gw.store, health, window, time.time()
    )
    return _json(doc)


async def cost(request: Request, window: str = "24h", lane: str = "client") -> Response:
    window, lane = panels.window_of(window), panels.lane_of(lane)
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(panels.cost, gw.config, gw.store, window, time.time(), lane)
    return _json(doc)


async def traffic(request: Request, window: str = "24h", lane: str = "client") -> Response:
    window, lane = panels.window_of(window), panels.lane_of(lane)
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(panels.traffic, gw.config, gw.store, window, time.time(), lane)
    return _json(doc)


async def rejections(request: Request, window: str = "24h") -> Response:
    """Requests refused before they had a record (gateway/edge/rejected.py)."""
    window = panels.window_of(window)
    gw = request.app.state.gateway
    return _json(await asyncio.to_thread(panels.rejections, gw.store, window, time.time()))


async def quality(request: Request) -> Response:
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(
        panels.quality, gw.config, gw.store, gw.gate_book.view, gw.scheduler.status
    )
    return _json(doc)


ROUTES = tuple(
    Route("GET", f"/console{path}", handler, schema=False)
    for path, handler in (
        ("", page),
        ("/assets/plotly.min.js", chart_library),
        ("/assets/{name}", asset),
        ("/api/upstreams", upstreams),
        ("/api/cost", cost),
        ("/api/traffic", traffic),
        ("/api/rejections", rejections),
        ("/api/quality", quality),
    )
)
