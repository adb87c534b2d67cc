"""From an HTTP request to a `Call`: what every front door does before it relays.

The body read with a size limit and parsed with orjson (`read_json`), the headers as a plain
dict (`headers_of`), the client's model name resolved to its route (`route_of`), the route's
profile applied and the record started (`call_of`), and a waiter for the client leaving
(`watch`). Used by every door's handlers (`gateway/edge/doors/*/routes.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request

from gateway.config import Config
from gateway.edge.request_id import client_id, ids_of
from gateway.errors import BadRequest, BodyTooLarge, ModelNotFound
from gateway.ledger.columns import count_of, flag_of
from gateway.ledger.record import Record
from gateway.serving.call import Call
from gateway.serving.outlet import direct_of
from gateway.serving.profile import apply_profile, params_hash
from gateway.trust.gate import pinned_upstream
from gateway.trust.watchdog import asked_not_to_think

# Scope keys: the request has a record (`call_of`); the model its body asked for (`read_json`,
# the access guard), kept on a `Rejection` should it be refused (`gateway/edge/rejected.py`).
RECORDED = "plumbline.recorded"
ASKED = "plumbline.asked_model"
# Where the access guard leaves the body it parsed (to check the model and reserve the budget):
# (the raw bytes, their JSON), for `read_json` to take instead of parsing the same bytes again.
PARSED = "plumbline.parsed"
# store_content: where `read_json` leaves the body's bytes, as received, for `call_of` (the key is
# in the scope only when the gateway keeps contents: `gateway.edge.app.KeepBody`).
BODY = "plumbline.body"
# The edge's scope key for the server's `send`: a stream begins from the upstream's callback,
# before its handler returns (`gateway/serving/stream_relay.py`).
SEND = "plumbline.send"


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
    """The request's body as parsed JSON: at most `limit` bytes (by its Content-Length and as
    read), not empty, valid, and nested at most `MAX_DEPTH` levels deep; else a `BadRequest`."""
    length = headers_of(request).get("content-length")
    if length is not None:
        _check_length(length, limit)
    raw = await _body(request, limit)
    if BODY in request.scope:
        request.scope[BODY] = raw
    if not raw or raw.isspace():  # (no stripped copy of a long body made to find out)
        raise BadRequest("The request body is empty; expected a JSON object.")
    parsed = request.scope.pop(PARSED, None)
    if parsed is not None and parsed[0] is raw:  # the access guard parsed these very bytes
        body = parsed[1]
    else:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"The request body is not valid JSON: {e}") from None
    if isinstance(body, dict):  # the model as asked, should the request be refused
        request.scope[ASKED] = body.get("model")
    # Bodies are re-serialised for the upstream (orjson stops at 255 levels): refuse deeper
    # nesting here. Counting brackets first keeps the walk off every ordinary request.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(body) > MAX_DEPTH:
        raise BadRequest(f"The request body is nested more than {MAX_DEPTH} levels deep.")
    return body


def _check_length(length: str, limit: int) -> None:
    try:
        declared = int(length)
    except ValueError:
        raise BadRequest("The Content-Length header is not a number.") from None
    if declared > limit:
        raise BodyTooLarge(f"The request body is {declared} bytes; the limit is {limit}.")


async def _body(request: Request, limit: int) -> bytes:
    """The body's bytes, refused once they pass `limit`."""
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
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


MAX_DEPTH = 64


def depth(value: Any) -> int:
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


def route_of(config: Config, name: str) -> str:
    """The route a client's model name (a route's or an alias) means; 404 for any other."""
    model = config.resolve(name)
    if model is None:
        raise ModelNotFound(
            f"The model {name!r} does not exist on this gateway; GET /v1/models lists them.",
            param="model",
        )
    return model


def call_of(request: Request, door: str, path: str, body: dict[str, Any]) -> Call:
    """The door-agnostic call for a validated request body: its route (an alias resolved), the
    route's profile applied, its record, its session and its eval-lane pin."""
    gw = request.app.state.gateway
    model = route_of(gw.config, body["model"])  # an alias means its route from here on
    heads = headers_of(request)
    chat = path == "/chat/completions"
    profile = gw.config.profile_for(model)
    if path != "/embeddings":
        apply_profile(body, profile, chat=chat)
    stream, odd_stream = flag_of(body.get("stream"))
    if "stream" in body and body["stream"] is not stream:
        body["stream"] = stream  # "false" is false: the upstream is sent what the gateway relays
    options = body.get("stream_options")
    options = options if isinstance(options, dict) else {}
    record = Record(
        request_id=ids_of(request.scope)[0],  # the id its answer says (gateway/edge/request_id.py)
        door=door,
        model=model,
        stream=stream,
        lane="eval" if heads.get("x-plumbline-lane") == "eval" else "client",
        thinking_off=chat and asked_not_to_think(body),
    )
    request.scope[RECORDED] = True  # its record counts it from here on, not a rejection
    # The cap as a count; a value that is not one is named on the record, never stored raw.
    record.max_tokens, odd_cap = count_of(body, "max_completion_tokens", "max_tokens")
    record.coerced = ",".join(n for n in (odd_stream, odd_cap) if n) or None
    send = request.scope.get(SEND) if stream else None
    call = Call(
        door=door,
        path=path,
        model=model,
        body=body,
        stream=stream,
        record=record,
        client_wants_usage=bool(options.get("include_usage")),
        session=heads.get(gw.config.server.session_header.lower()),
        pin=pinned_upstream(heads, record.lane, gw.config.models[model].upstreams),
        prompt=request.scope.get(BODY),  # store_content: the prompt, as received
        send=send,
        direct=direct_of(request.scope, send),
        client_request_id=client_id(request.scope),
    )

    def hash_params() -> None:
        # The client's parameters; a successful attempt marks its upstream's instead (adapt).
        if record.params_hash is None:
            record.params_hash = params_hash(body, profile is not None)

    call.defer(hash_params)
    if stream:  # its start journalled once it is on its way: a crash leaves it "Interrupted"
        call.defer(lambda: gw.begin(record))
    if gw.tracing is not None:  # [telemetry]: the request's trace (gateway/telemetry.py)
        trace = record.trace = gw.tracing.begin(heads.get("traceparent"), door, model, stream)
        record.trace_id = trace.trace_id
    return call
