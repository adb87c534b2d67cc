"""`POST /v1/messages/count_tokens`: the prompt's tokens as the route's engine counts them.

The request is translated as `/v1/messages` would translate it (with the route's profile), then
counted by the same counter that sizes the window clamp (gateway/serving/tokenizer.py): the
tokenizer of the first upstream of the route whose tokenizer is known, with its chat template,
as vLLM counts. Failing that, the first healthy vLLM upstream of the route counts it with
``POST /tokenize``. A route with neither (API providers without a `tokenizer`), or whose
upstreams do not answer, gets an estimate of 4 bytes of the translated prompt's JSON a token.
The answer says which: ``x-plumbline-token-count: tokenizer <upstream>`` or ``estimate``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from gateway.config import Config, Upstream
from gateway.edge.doors.messages import protocol
from gateway.edge.doors.messages.edits import tokens
from gateway.edge.doors.messages.translation import chat_request
from gateway.errors import ModelNotFound
from gateway.serving.pool import UpstreamState
from gateway.serving.profile import apply_profile
from gateway.serving.tokenizer import Counter, tokenizer_source
from gateway.serving.upstream import Target, root_url
from gateway.serving.wire import Origin, Wire

log = logging.getLogger(__name__)

HEADER = "x-plumbline-token-count"
TIMEOUT_S = 10.0


async def count(
    config: Config,
    upstreams: Mapping[str, Upstream],
    states: Mapping[str, UpstreamState],
    wire: Wire,
    body: Any,
    counter: Counter | None = None,
) -> Response:
    """The answer to a count_tokens `body`: `upstreams` by name, their live `states` (the
    pool's), the `wire` the tokenize request goes out on, and the `counter` of the window
    clamp (dispatch's: its tokenizers are loaded once for both)."""
    if isinstance(body, dict) and "max_tokens" not in body:
        body = {**body, "max_tokens": 2**31}  # count_tokens takes none
    protocol.check(body)
    model = config.resolve(body["model"])
    if model is None:
        raise ModelNotFound(
            f"The model {body['model']!r} does not exist on this gateway; GET /v1/models lists "
            "them.",
            param="model",
        )
    chat = chat_request(body).chat
    apply_profile(chat, config.profile_for(model), chat=True)
    names = config.models[model].names
    route = [upstreams[name] for name in names]
    n, how = await _counted(config, route, counter, chat) if counter else (None, "estimate")
    if n is None:
        n, how = await _tokenized(route, states, wire, chat)
    if n is None:
        n = tokens([chat["messages"], chat.get("tools")])  # the context edits' estimate
        how = "estimate"
    return Response(
        orjson.dumps({"input_tokens": n}), media_type="application/json", headers={HEADER: how}
    )


async def _counted(
    config: Config, route: list[Upstream], counter: Counter, chat: dict[str, Any]
) -> tuple[int | None, str]:
    for upstream in route:
        source = tokenizer_source(config, upstream)
        if source is not None and (n := await counter.count(source, chat)) is not None:
            return n, f"tokenizer {upstream.name}"
    return None, "estimate"


async def _tokenized(
    route: list[Upstream], states: Mapping[str, UpstreamState], wire: Wire, chat: dict[str, Any]
) -> tuple[int | None, str]:
    for upstream in route:
        name = upstream.name
        state = states.get(name)
        if upstream.kind != "vllm" or (state is not None and not state.healthy):
            continue
        payload = {
            "model": upstream.model,
            "messages": chat["messages"],
            "add_generation_prompt": True,
        }
        for key in ("tools", "chat_template_kwargs"):
            if chat.get(key):
                payload[key] = chat[key]
        try:
            async with asyncio.timeout(TIMEOUT_S):
                reply = await wire.post(
                    Origin.parse(root_url(upstream)),
                    "/tokenize",
                    Target.of(upstream).head,
                    orjson.dumps(payload),
                )
                data = await reply.read()
            if reply.status >= 400:
                raise ValueError(f"HTTP {reply.status}")
            return int(orjson.loads(data)["count"]), f"tokenizer {name}"
        except (TimeoutError, OSError, ValueError, KeyError, TypeError) as e:
            log.info("count_tokens: %s did not tokenize (%s); trying the next", name, e)
    return None, "estimate"
