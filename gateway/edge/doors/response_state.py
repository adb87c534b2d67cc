"""The Responses door's state: `store`, `previous_response_id` and `item_reference` on the
gateway's own store (`gateway.ledger.responses_store`, shared by every gateway on one database).

`resolve` reads a request's state before it is translated: the stored input and output items of
`previous_response_id` go before the new input (as OpenAI does; the earlier response's
`instructions` and `tools` are not carried over), each `item_reference` becomes the stored item
of that id (an output item, or an input item the gateway gave an id to), and every input item
without an id gets one. `ResponseState.keep` stores the finished response (`store` defaults to
true, as OpenAI's) with the whole input it was answered from, so a continuation reads one
response. All of it is under the request's key (`CURRENT_TICKET`); with no keys configured,
one shared namespace.

Writes go to a small thread pool and are awaited by the next lookup on this process, so a client
that continues at once finds its response; another gateway on the same store sees it once the
write commits (milliseconds after the answer's last byte).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy.engine import Engine

from gateway.edge.access import CURRENT_TICKET
from gateway.edge.doors.chunks import record_usage
from gateway.edge.doors.response_object import render, usage_of
from gateway.edge.doors.responses_stream import ResponsesTranslator
from gateway.errors import BadRequest, GatewayError
from gateway.ledger import responses_store

log = logging.getLogger("plumbline")
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="stored")
_PENDING: set[concurrent.futures.Future[Any]] = set()
PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}


class NotFound(GatewayError):
    """A stored response or item this key has none of (OpenAI answers 404 the same way)."""

    status = 404
    type = "invalid_request_error"


def namespace() -> str:
    """The key the request came with ('' with no keys configured): whose responses it sees."""
    ticket = CURRENT_TICKET.get()
    return ticket.key.id if ticket is not None else ""


def engine_of(gateway: Any) -> Engine | None:
    store = getattr(gateway, "store", None)
    return store.engine if store is not None else None


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


def keep(fn: Any, *args: Any, **kw: Any) -> None:
    """Run a store write in the pool; the next lookup on this process waits for it."""
    future = _POOL.submit(fn, *args, **kw)
    _PENDING.add(future)

    def done(f: concurrent.futures.Future[Any]) -> None:
        _PENDING.discard(f)
        if f.exception() is not None:
            log.error("storing a response failed: %r", f.exception())

    future.add_done_callback(done)


async def settled() -> None:
    """Wait for the store writes this process has under way."""
    for future in list(_PENDING):
        with contextlib.suppress(Exception):  # logged by `keep`
            await asyncio.wrap_future(future)


async def in_thread(fn: Any, *args: Any) -> Any:
    """A store read, after this process's pending writes, off the event loop."""
    await settled()
    return await asyncio.to_thread(fn, *args)


@dataclass(slots=True)
class ResponseState:
    """What a Responses request continues from, and whether and where its answer is stored."""

    engine: Engine | None
    key: str
    store: bool
    previous: str | None = None
    context: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def input(self) -> list[dict[str, Any]]:
        """The whole input the answer is made from: the earlier response's items, then ours."""
        return [*self.context, *self.inputs]

    def stamp(self, response: dict[str, Any]) -> dict[str, Any]:
        response["store"] = self.store
        response["previous_response_id"] = self.previous
        return response

    def keep(self, response: dict[str, Any]) -> None:
        """Store a finished response (when `store` and the gateway has a store)."""
        if not self.store or self.engine is None:
            return
        keep(
            responses_store.save,
            self.engine,
            rid=response["id"],
            key_id=self.key,
            door="responses",
            created=float(response.get("created_at") or time.time()),
            body=response,
            inputs=self.input,
            outputs=list(response.get("output") or ()),
        )


def as_items(raw: Any) -> list[dict[str, Any]]:
    """A request's `input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        part = {"type": "input_text", "text": raw}
        return [{"type": "message", "role": "user", "content": [part]}]
    return list(raw)


def with_id(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as stored and listed: with an id, a message in OpenAI's item shape (`type`,
    its text as a content part)."""
    kind = item.get("type") or ("message" if "role" in item else "item")
    if kind == "message":
        item = {**item, "type": "message"}
        if isinstance(item.get("content"), str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": part, "text": item["content"]}]
    return item if item.get("id") else {"id": new_id(PREFIXES.get(kind, "item")), **item}


def _read(
    engine: Engine, key: str, previous: str | None, items: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the earlier response's items, our items with references resolved), in one thread."""
    context: list[dict[str, Any]] = []
    if previous is not None:
        if responses_store.load(engine, previous, key, "responses") is None:
            raise NotFound(
                f"Previous response with id '{previous}' not found.", param="previous_response_id"
            )
        context = responses_store.items(engine, previous)
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            ref = item.get("id")
            found = responses_store.item(engine, ref, key) if isinstance(ref, str) else None
            if found is None:
                raise NotFound(f"Item with id '{ref}' not found.", param=f"input[{i}]")
            out.append(found)
        else:
            out.append(item)
    return context, out


async def resolve(gateway: Any, body: dict[str, Any]) -> ResponseState:
    """The request's state; `body["input"]` becomes the whole input (references resolved)."""
    engine, key = engine_of(gateway), namespace()
    previous = body.get("previous_response_id")
    items = as_items(body["input"])
    refers = previous is not None or any(
        isinstance(i, dict) and i.get("type") == "item_reference" for i in items
    )
    state = ResponseState(engine, key, body.get("store") is not False and engine is not None)
    body.pop("previous_response_id", None)  # never relayed: the upstream keeps no state of ours
    if refers:
        if engine is None:
            raise BadRequest(
                "'previous_response_id' and 'item_reference' need stored responses, and this "
                "gateway keeps no store ([store] enabled = false); send the whole conversation.",
                param="previous_response_id" if previous is not None else "input",
            )
        state.previous = previous
        state.context, items = await in_thread(_read, engine, key, previous, items)
    if state.store or refers:  # a stateless request is relayed untouched
        state.inputs = [with_id(i) if isinstance(i, dict) else i for i in items]
        body["input"] = state.input
    return state


class StoringTranslator(ResponsesTranslator):
    """The Responses translator that stamps `store` and `previous_response_id` on the response
    object (every event's and the whole one) and stores the finished response."""

    def __init__(self, state: ResponseState, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.state = state

    def _response(
        self, status: str, usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self.state.stamp(super()._response(status, usage, error))

    def whole(self, chat: dict[str, Any]) -> bytes:
        chat = {**chat, "usage": record_usage(self.record)}
        response = render(chat, self.request, self.chat_body, self.rid, self.created, self.tools)
        self.state.keep(self.state.stamp(response))
        return orjson.dumps(response)

    def _done(self) -> list[bytes]:
        out = super()._done()
        self.state.keep(self._response("completed", usage_of(record_usage(self.record))))
        return out
