"""HTTP handlers of the Messages front door: read, translate, respond.

The request is turned into a chat-completions body (`translation`) and goes through the same
`call_of` (profile, record) and `Relay.respond` (routing, dispatch, taps, record) as
`/v1/chat/completions`; a translator on the call (`stream`) renders the answer back as an
Anthropic message. The door answers every error in Anthropic's shape (`gateway/edge/render.py`).
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.doors.messages import protocol, threads, tokens, translation
from gateway.edge.doors.messages.stream import MessagesTranslator
from gateway.edge.doors.messages.threads import ThreadError, ThreadTranslator
from gateway.edge.doors.policy import mark_dropped
from gateway.edge.render import error_response, unexpected
from gateway.edge.request import call_of, headers_of, read_json, watch
from gateway.edge.route import Route
from gateway.errors import GatewayError

log = logging.getLogger("plumbline")


async def create_message(request: Request) -> Response:
    gw = request.app.state.gateway
    try:
        body = await read_json(request, gw.config.server.max_body_bytes)
        thread = body.pop("thread", None) if isinstance(body, dict) else None
        protocol.check(body)
        kept = await threads.resolve(gw, body, thread)
        served = translation.served_of(gw.config, body["model"])
        translated = translation.chat_request(body, served)
        call = call_of(request, "messages", "/chat/completions", translated.chat)
        mark_dropped(call.record, *translated.dropped)
        if call.session is None:  # Claude Code's session id: sticky routing
            heads = headers_of(request)
            call.session = translation.session_of(body, heads.get("x-claude-code-session-id"))
        call.translator = (
            MessagesTranslator(body, call.record, translated)
            if kept is None
            else ThreadTranslator(kept, body, call.record, translated)
        )
        return await gw.relay.respond(call, watch(request))
    except ThreadError as e:
        return e.response()
    except GatewayError as e:
        return error_response(e, anthropic_shape=True)
    except Exception:
        log.exception("unhandled error on /v1/messages")
        return error_response(unexpected(), anthropic_shape=True)


async def count_message_tokens(request: Request) -> Response:
    gw = request.app.state.gateway
    try:
        body = await read_json(request, gw.config.server.max_body_bytes)
        return await tokens.count(
            gw.config, gw.upstreams, gw.pool.states, gw.wire, body, gw.dispatcher.counter
        )
    except GatewayError as e:
        return error_response(e, anthropic_shape=True)


async def hello(request: Request) -> Response:
    """Claude Code's start-up preconnect: answered at once."""
    return Response(b"{}", media_type="application/json")


ROUTES = (
    Route("POST", "/v1/messages", create_message, generation=True),
    Route("POST", "/v1/messages/count_tokens", count_message_tokens),
    Route("GET", "/api/hello", hello, also=("HEAD",), schema=False),
)
