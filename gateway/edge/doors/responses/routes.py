"""HTTP handler of the Responses front door: read, translate, respond.

The request is turned into a chat-completions body (`translation`) and goes through the same
`call_of` (profile, record) and `Relay.respond` (routing, dispatch, taps, record) as
`/v1/chat/completions`; a translator on the call (`stream`) renders the answer back as a
Response. A plain request may be relayed natively to an upstream that speaks Responses.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.doors.policy import mark_dropped
from gateway.edge.doors.responses import protocol, state, stored, translation
from gateway.edge.doors.responses.state import StoringTranslator
from gateway.edge.request import call_of, read_json, watch
from gateway.edge.route import Route
from gateway.errors import BadRequest


async def create_response(request: Request) -> Response:
    gw = request.app.state.gateway
    body = await read_json(request, gw.config.server.max_body_bytes)
    protocol.check(body)
    kept = await state.resolve(gw, body)
    translated = translation.translate(body)
    call = call_of(request, "responses", "/chat/completions", translated.chat)
    mark_dropped(call.record, *translated.dropped)
    if call.session is None and isinstance(body.get("prompt_cache_key"), str):
        call.session = body["prompt_cache_key"]  # Codex's session id: sticky routing
    call.translator = StoringTranslator(
        kept, body, call.body, call.record, translated.tools, gw.config.server.heartbeat_s
    )
    if translated.plain and not kept.store:  # a stored answer is the translator's to keep
        call.native = translation.native_request(body, call.body)
    try:
        return await gw.relay.respond(call, watch(request))
    except BadRequest as e:
        raise translation.context_error(e) from None


ROUTES = (
    Route("POST", "/v1/responses", create_response, generation=True),
    *stored.ROUTES,  # GET and DELETE /v1/responses/{id}, its input_items
)
