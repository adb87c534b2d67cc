"""HTTP handlers of the OpenAI front door: each one reads, validates and calls one function.

Bodies are read with a size limit and parsed with orjson; the pydantic models in `protocol`
validate the parsed dict, which is then relayed as is.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from fastapi import APIRouter
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Config
from gateway.edge.protocol import ChatRequest, CompletionRequest, EmbeddingRequest, validate
from gateway.errors import BadRequest, BodyTooLarge, ModelNotFound
from gateway.ledger.record import Record
from gateway.serving.dispatch import Call
from gateway.serving.profile import apply_profile, params_hash
from gateway.serving.relay import respond
from gateway.trust.gate import pinned_upstream

router = APIRouter()

JSON = "application/json"


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` documenting a body the handler parses itself: the model's JSON schema,
    with its `$defs` inlined (the models are not recursive), so fuzzers can generate from it."""
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

    return {"requestBody": {"required": True, "content": {JSON: {"schema": inline(schema)}}}}


def headers_of(request: Request) -> dict[str, str]:
    """The request's headers as a plain dict, built once per request and kept in its scope
    (Starlette's `Headers.get` scans the header list on every lookup). ASGI servers give the
    names in lower case; of a repeated header the last wins."""
    scope = request.scope
    heads = scope.get("plumbline.headers")
    if heads is None:
        heads = scope["plumbline.headers"] = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
        }
    return heads


async def read_json(request: Request, limit: int) -> Any:
    length = headers_of(request).get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise BadRequest("The Content-Length header is not a number.") from None
        if declared > limit:
            raise BodyTooLarge(f"The request body is {declared} bytes; the limit is {limit}.")
    chunks: list[bytes] = []
    size = 0
    receive = request.receive  # straight from the server: Starlette's stream() is a generator
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise BadRequest("The client closed the connection before the body was complete.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if not raw.strip():
        raise BadRequest("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"The request body is not valid JSON: {e}") from None
    # Bodies are re-serialised for the upstream (orjson stops at 255 levels): refuse deeper
    # nesting here. Counting brackets first keeps the walk off every ordinary request.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise BadRequest(f"The request body is nested more than {MAX_DEPTH} levels deep.")
    return body


MAX_DEPTH = 64


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return deepest


def watch(request: Request) -> Callable[[], Awaitable[None]]:
    """Waits until the client disconnects (the body has been read, so nothing else arrives)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return disconnected


def _route_of(config: Config, name: str) -> str:
    """The route a client's model name (a route's or an alias) means; 404 for any other."""
    model = config.resolve(name)
    if model is None:
        raise ModelNotFound(
            f"The model {name!r} does not exist on this gateway; GET /v1/models lists them.",
            param="model",
        )
    return model


def _call(request: Request, door: str, path: str, body: dict[str, Any]) -> Call:
    gw = request.app.state.gateway
    model = _route_of(gw.config, body["model"])  # an alias means its route from here on
    heads = headers_of(request)
    chat = path == "/chat/completions"
    if path != "/embeddings":
        apply_profile(body, gw.config.profile_for(model), chat=chat)
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    options = options if isinstance(options, dict) else {}
    record = Record(
        # Unique, not secret: the PRNG (reseeded in forked workers) spares a syscall per request.
        request_id=f"req-{random.getrandbits(96):024x}",
        door=door,
        model=model,
        stream=stream,
        lane="eval" if heads.get("x-plumbline-lane") == "eval" else "prod",
        max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        params_hash=params_hash(body),
    )
    return Call(
        door=door,
        path=path,
        model=model,
        body=body,
        stream=stream,
        record=record,
        client_wants_usage=bool(options.get("include_usage")),
        session=heads.get(gw.config.server.session_header.lower()),
        pin=pinned_upstream(heads, record.lane, gw.config.models[model].upstreams),
    )


@router.post("/v1/chat/completions", openapi_extra=_request_body(ChatRequest))
async def chat_completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(ChatRequest, body)
    return await respond(gw, _call(request, "chat", "/chat/completions", body), watch(request))


@router.post("/v1/completions", openapi_extra=_request_body(CompletionRequest))
async def completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(CompletionRequest, body)
    return await respond(gw, _call(request, "completions", "/completions", body), watch(request))


@router.post("/v1/embeddings", openapi_extra=_request_body(EmbeddingRequest))
async def embeddings(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(EmbeddingRequest, body)
    body["stream"] = False
    return await respond(gw, _call(request, "embeddings", "/embeddings", body), watch(request))


def model_entry(
    config: Config,
    model: str,
    asked: str | None = None,
    learned: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A route as an OpenAI model object: its name (or the alias `asked`, with `alias_of`), its
    aliases, and its context window (`Config.context_window`: the smallest its upstreams serve,
    `learned` from the servers themselves where they said) as `context_window` and as vLLM's
    `max_model_len`, when known."""
    entry: dict[str, Any] = {
        "id": asked or model,
        "object": "model",
        "created": 0,
        "owned_by": "plumbline",
    }
    if asked is not None and asked != model:
        entry["alias_of"] = model
    else:
        entry["aliases"] = config.aliases_of(model)
    window = config.context_window(model, learned)
    if window is not None:
        entry["context_window"] = entry["max_model_len"] = window
    return entry


@router.get("/v1/models")
async def models(request: Request) -> Response:
    gw = request.app.state.gateway
    data = [model_entry(gw.config, name, learned=gw.engines.windows) for name in gw.config.models]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type=JSON)


@router.get("/v1/models/{model:path}")
async def model(request: Request, model: str) -> Response:
    gw = request.app.state.gateway
    route = _route_of(gw.config, model)
    entry = model_entry(gw.config, route, asked=model, learned=gw.engines.windows)
    return Response(orjson.dumps(entry), media_type=JSON)


@router.get("/health")
async def health(request: Request) -> Response:
    gw = request.app.state.gateway
    upstreams = {
        name: {"healthy": st.healthy, "inflight": st.inflight, "cooling": st.cooling_until > 0}
        for name, st in gw.pool.states.items()
    }
    for name, st in gw.pool.states.items():
        upstreams[name]["demoted"] = st.demoted
        # Which gateways' watchdogs demote it: this one, and others on the same store.
        here = [gw.id] if name in gw.watchdog.demoted else []
        upstreams[name]["demoted_by"] = here + sorted(gw.demoted_elsewhere.get(name, {}))
        upstreams[name]["engine"] = gw.engines.known.get(name)
        # The engine process `plumbline up` supervises: state, restarts, last exit status.
        upstreams[name]["process"] = gw.engine_view(name)
    body = {
        "status": "ok",
        "upstreams": upstreams,
        "watchdog": gw.watchdog.snapshot(),
        "gate": gw.gate_book.view(),
    }
    return Response(orjson.dumps(body), media_type=JSON)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.gateway.metrics.render()
    return Response(body, media_type=content_type)
