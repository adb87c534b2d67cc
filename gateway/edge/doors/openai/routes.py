"""HTTP handlers of the OpenAI front door: each one reads, validates and calls one function.

Bodies are read with a size limit and parsed with orjson (`gateway/edge/request.py`); the pydantic
models in `protocol` validate the parsed dict, which is then relayed as is. `ROUTES` is the door's
rows of the edge's request table (`gateway/edge/table.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Config
from gateway.edge.doors.messages import models as messages_models
from gateway.edge.doors.openai.protocol import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    validate,
)
from gateway.edge.request import call_of, read_json, route_of, watch
from gateway.edge.route import Route

JSON = "application/json"


async def chat_completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(ChatRequest, body)
    call = call_of(request, "chat", "/chat/completions", body)
    return await gw.relay.respond(call, watch(request))


async def completions(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    validate(CompletionRequest, body)
    call = call_of(request, "completions", "/completions", body)
    return await gw.relay.respond(call, watch(request))


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


async def models(request: Request) -> Response:
    gw = request.app.state.gateway
    data = [model_entry(gw.config, name, learned=gw.engines.windows) for name in gw.config.models]
    if messages_models.wants_anthropic(request.headers):  # Anthropic's Models API shape
        return Response(orjson.dumps(messages_models.model_list(data)), media_type=JSON)
    return Response(orjson.dumps({"object": "list", "data": data}), media_type=JSON)


async def model(request: Request, model: str) -> Response:
    gw = request.app.state.gateway
    route = route_of(gw.config, model)
    entry = model_entry(gw.config, route, asked=model, learned=gw.engines.windows)
    if messages_models.wants_anthropic(request.headers):
        entry = messages_models.model_info(entry)
    return Response(orjson.dumps(entry), media_type=JSON)


ROUTES = (
    Route("POST", "/v1/chat/completions", chat_completions, body=ChatRequest, generation=True),
    Route("POST", "/v1/completions", completions, body=CompletionRequest, generation=True),
    Route("POST", "/v1/embeddings", embeddings, body=EmbeddingRequest, generation=True),
    Route("GET", "/v1/models", models),
    Route("GET", "/v1/models/{model:path}", model),
)
