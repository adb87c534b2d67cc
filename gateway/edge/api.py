"""HTTP handlers of the OpenAI front door: each one reads, validates and calls one function.

Bodies are read with a size limit and parsed with orjson (`gateway/edge/request.py`); the pydantic
models in `protocol` validate the parsed dict, which is then relayed as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Config
from gateway.edge.protocol import ChatRequest, CompletionRequest, EmbeddingRequest, validate
from gateway.edge.request import call_of, read_json, route_of, watch
from gateway.ledger.backlog import health as ledger_health

if TYPE_CHECKING:
    from gateway.edge.app import Gateway

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


@router.post("/v1/chat/completions", openapi_extra=_request_body(ChatRequest))
async def chat_completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(ChatRequest, body)
    call = call_of(request, "chat", "/chat/completions", body)
    return await gw.relay.respond(call, watch(request))


@router.post("/v1/completions", openapi_extra=_request_body(CompletionRequest))
async def completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(CompletionRequest, body)
    call = call_of(request, "completions", "/completions", body)
    return await gw.relay.respond(call, watch(request))


@router.post("/v1/embeddings", openapi_extra=_request_body(EmbeddingRequest))
async def embeddings(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(EmbeddingRequest, body)
    body["stream"] = False
    call = call_of(request, "embeddings", "/embeddings", body)
    return await gw.relay.respond(call, watch(request))


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
    route = route_of(gw.config, model)
    entry = model_entry(gw.config, route, asked=model, learned=gw.engines.windows)
    return Response(orjson.dumps(entry), media_type=JSON)


@router.get("/health")
async def health(request: Request) -> Response:
    return Response(orjson.dumps(health_of(request.app.state.gateway)), media_type=JSON)


def health_of(gw: Gateway) -> dict[str, Any]:
    """`/health`'s document: every upstream's live state, the watchdog's, the gate's."""
    errors = gw.upstream_errors.snapshot()
    upstreams = {
        name: {
            # failing | degraded | ok | no traffic, from its failed calls of the last 15
            # minutes (gateway/ledger/upstream_state.py), with the figures behind it.
            **errors.get(name, {}),
            "healthy": st.healthy,
            "inflight": st.inflight,
            "cooling": st.cooling_until > 0,
            "demoted": st.demoted,
            # Which gateways' watchdogs demote it: this one, and others on the same store.
            "demoted_by": gw.demotions.by(name),
            "engine": gw.engines.known.get(name),
            # The engine process `plumbline up` supervises: state, restarts, last exit status.
            "process": gw.engine_view(name),
        }
        for name, st in gw.pool.states.items()
    }
    return {
        "status": "ok",
        "upstreams": upstreams,
        "watchdog": gw.watchdog.snapshot(),
        "gate": gw.gate_book.view(),
        # The records not in the store yet: spooled, quarantined (gateway/ledger/backlog.py).
        "ledger": ledger_health(gw.queue),
        # Scheduled rounds: this gateway's last ones, how each ended, what the tripwire found.
        "evals": gw.scheduler.status(),
    }


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.gateway.metrics.render()
    return Response(body, media_type=content_type)
