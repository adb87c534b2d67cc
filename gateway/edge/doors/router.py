"""HTTP handlers of the Responses and Messages front doors: read, translate, respond.

Both doors turn their request into a chat-completions body and go through the same `call_of`
(profile, record) and `Relay.respond` (routing, dispatch, taps, record) as `/v1/chat/completions`; a
translator on the call renders the answer back in the door's API. The Messages door answers every
error in Anthropic's shape.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.doors import (
    message_threads,
    messages,
    messages_request,
    messages_tokens,
    protocol_messages,
    protocol_responses,
    response_state,
    responses,
)
from gateway.edge.doors.message_threads import ThreadError, ThreadTranslator
from gateway.edge.doors.messages_stream import MessagesTranslator
from gateway.edge.doors.policy import mark_dropped
from gateway.edge.doors.response_state import StoringTranslator
from gateway.edge.doors.responses_stored import router as stored_router
from gateway.edge.request import call_of, headers_of, read_json, watch
from gateway.errors import BadRequest, GatewayError

log = logging.getLogger("plumbline")
router = APIRouter()
router.include_router(stored_router)  # GET and DELETE /v1/responses/{id}, its input_items


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    protocol_responses.check(body)
    state = await response_state.resolve(gw, body)
    translation = responses.translate(body)
    call = call_of(request, "responses", "/chat/completions", translation.chat)
    mark_dropped(call.record, *translation.dropped)
    if call.session is None and isinstance(body.get("prompt_cache_key"), str):
        call.session = body["prompt_cache_key"]  # Codex's session id: sticky routing
    call.translator = StoringTranslator(
        state, body, call.body, call.record, translation.tools, gw.config.server.heartbeat_s
    )
    if translation.plain and not state.store:  # a stored answer is the translator's to keep
        call.native = responses.native_request(body, call.body)
    try:
        return await gw.relay.respond(call, watch(request))
    except BadRequest as e:
        raise responses.context_error(e) from None


@router.post("/v1/messages")
async def create_message(request: Request) -> Response:
    gw = request.app.state.gateway
    try:
        body = await read_json(request, gw.config.server.max_body_bytes)
        thread = body.pop("thread", None) if isinstance(body, dict) else None
        protocol_messages.check(body)
        kept = await message_threads.resolve(gw, body, thread)
        served = messages_request.served_of(gw.config, body["model"])
        translation = messages.chat_request(body, served)
        call = call_of(request, "messages", "/chat/completions", translation.chat)
        mark_dropped(call.record, *translation.dropped)
        if call.session is None:  # Claude Code's session id: sticky routing
            heads = headers_of(request)
            call.session = messages_request.session_of(body, heads.get("x-claude-code-session-id"))
        call.translator = (
            MessagesTranslator(body, call.record, translation)
            if kept is None
            else ThreadTranslator(kept, body, call.record, translation)
        )
        return await gw.relay.respond(call, watch(request))
    except ThreadError as e:
        return e.response()
    except GatewayError as e:
        return messages.error_response(e)
    except Exception:
        log.exception("unhandled error on /v1/messages")
        error = GatewayError("The gateway failed to handle this request; it has been logged.")
        return messages.error_response(error)


@router.post("/v1/messages/count_tokens")
async def count_message_tokens(request: Request) -> Response:
    gw = request.app.state.gateway
    try:
        body = await read_json(request, gw.config.server.max_body_bytes)
        return await messages_tokens.count(gw.config, gw.upstreams, gw.pool.states, gw.wire, body)
    except GatewayError as e:
        return messages.error_response(e)


@router.api_route("/api/hello", methods=["GET", "HEAD"], include_in_schema=False)
async def hello(request: Request) -> Response:
    """Claude Code's start-up preconnect: answered at once."""
    return Response(b"{}", media_type="application/json")
