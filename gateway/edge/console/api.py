"""The console's routes: the page, its static files, the chart library and the panel JSON.
Each is sent gzipped to a client that takes gzip (the files compressed once per process).

Every route sits under ``/console``, which the access guard opens to admin and console keys
only (a browser sends the key as the password of HTTP Basic auth; the guard's 401 asks for it).
The handlers are thin: what the panels show is `gateway.edge.console.panels`'.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
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
# plotly.js's basic partial bundle (npm `plotly.js-basic-dist-min`), put beside the page's files
# by deploy/install.sh; not in the repository.
PARTIAL = "plotly-basic.min.js"
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


@functools.cache
def _gzipped(name: str) -> bytes:
    """A static file gzipped once per process (the files do not change while it runs)."""
    return gzip.compress(_static(name), 9)


@functools.cache
def chart_bundle() -> tuple[str, bytes, bytes]:
    """(which bundle, its bytes, gzipped once): plotly.js's basic partial bundle (bar, scatter,
    pie: what the charts draw) where `deploy/install.sh` put it beside the page's files, else the
    full plotly.min.js the installed `plotly` package ships."""
    static = resources.files("gateway.edge.console").joinpath("static", PARTIAL)
    if static.is_file():
        name, body = PARTIAL, static.read_bytes()
    else:
        full = resources.files("plotly").joinpath("package_data", "plotly.min.js")
        name, body = "plotly.min.js", full.read_bytes()
    return name, body, gzip.compress(body, 9)


def accepts_gzip(request: Request) -> bool:
    """Whether the client takes gzip (`Accept-Encoding`, a q of 0 refusing it)."""
    for part in request.headers.get("accept-encoding", "").lower().split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip() in ("gzip", "*"):
            q = params.strip().removeprefix("q=")
            return not (params.strip().startswith("q=") and _zero(q))
    return False


def _zero(q: str) -> bool:
    try:
        return float(q) == 0
    except ValueError:
        return False


def _encoded(
    request: Request, plain: bytes, packed: bytes | None, media_type: str, headers: dict[str, str]
) -> Response:
    """`plain`, or `packed` (its gzip) with Content-Encoding when the client takes gzip."""
    vary = {**headers, "vary": "Accept-Encoding"}
    if packed is not None and accepts_gzip(request):
        return Response(packed, media_type=media_type, headers={**vary, "content-encoding": "gzip"})
    return Response(plain, media_type=media_type, headers=vary)


def _json(request: Request, data: Any) -> Response:
    body = orjson.dumps(data)
    packed = gzip.compress(body, 5) if len(body) > 1024 else None
    return _encoded(request, body, packed, JSON, {"cache-control": "no-store"})


async def page(request: Request) -> Response:
    html = "console.html"
    return _encoded(request, _static(html), _gzipped(html), "text/html; charset=utf-8", SECURITY)


async def chart_library(request: Request) -> Response:
    """plotly.js: the basic partial bundle when installed, else the `plotly` package's full one
    (no copy in this repository); gzipped once, sent so to clients that take gzip."""
    _name, body, packed = await asyncio.to_thread(chart_bundle)
    return _encoded(
        request,
        body,
        packed,
        "text/javascript; charset=utf-8",
        {"cache-control": "private, max-age=86400", "x-content-type-options": "nosniff"},
    )


async def asset(request: Request, name: str) -> Response:
    if name not in ASSETS:
        raise NotAnAsset(f"Unknown console asset: {name}")
    return _encoded(request, _static(name), _gzipped(name), ASSETS[name], SECURITY)


async def upstreams(request: Request, window: str = "24h") -> Response:
    gw = request.app.state.gateway
    window = panels.window_of(window)
    health = health_of(gw)
    doc = await asyncio.to_thread(
        panels.upstreams, gw.config, gw.store, health, window, time.time()
    )
    return _json(request, doc)


async def cost(request: Request, window: str = "24h", lane: str = "client") -> Response:
    window, lane = panels.window_of(window), panels.lane_of(lane)
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(panels.cost, gw.config, gw.store, window, time.time(), lane)
    return _json(request, doc)


async def traffic(request: Request, window: str = "24h", lane: str = "client") -> Response:
    window, lane = panels.window_of(window), panels.lane_of(lane)
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(panels.traffic, gw.config, gw.store, window, time.time(), lane)
    return _json(request, doc)


async def rejections(request: Request, window: str = "24h") -> Response:
    """Requests refused before they had a record (gateway/edge/rejected.py)."""
    window = panels.window_of(window)
    gw = request.app.state.gateway
    return _json(request, await asyncio.to_thread(panels.rejections, gw.store, window, time.time()))


async def quality(request: Request) -> Response:
    gw = request.app.state.gateway
    doc = await asyncio.to_thread(
        panels.quality, gw.config, gw.store, gw.gate_book.view, gw.scheduler.status
    )
    return _json(request, doc)


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
