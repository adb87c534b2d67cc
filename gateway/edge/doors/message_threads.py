"""The Messages door's threads (`anthropic-beta: message-threads-…`) on the gateway's own store.

Anthropic's SDK (`client.beta.messages.tool_runner`, `client.beta.messages.thread()`) sends
`thread: {"type": "create"}` with the whole conversation, then `thread: {"type": "continue",
"previous_message_id": <the reply's id>}` with only the new turn's messages and without
`system` and `tools` (create-only fields: the server keeps them). The door keeps each reply's
conversation (system, tools, every message and the reply) under the reply's id and key
(`gateway.ledger.responses_store`, door `messages`); a `continue` puts the stored conversation
before the new messages, and the stored `system` and `tools` where the request has none.

Refusals carry the `error.details.error_code` the SDK recovers from: `thread_not_found` (an
unknown, expired or other key's message id: the SDK replays the whole history under a new
thread) and, on a gateway with no store, `thread_unsupported_request` (the tool runner goes on
without threads). A `thread` is never dropped silently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.engine import Engine
from starlette.responses import Response

from gateway.edge.doors.chunks import Piece
from gateway.edge.doors.messages import input_of
from gateway.edge.doors.messages_stream import MessagesTranslator
from gateway.edge.doors.response_state import engine_of, in_thread, keep, namespace
from gateway.errors import GatewayError
from gateway.ledger import responses_store

CREATE_ONLY = ("system", "tools")


class ThreadError(GatewayError):
    """A thread the door cannot honour, in Anthropic's shape with the SDK's `error_code`."""

    def __init__(self, status: int, kind: str, message: str, code: str, **details: Any):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.details = {"error_code": code, **details}

    def response(self) -> Response:
        error = {"type": self.kind, "message": self.message, "details": self.details}
        body = {"type": "error", "error": error}
        return Response(orjson.dumps(body), status_code=self.status, media_type="application/json")


@dataclass(slots=True)
class Thread:
    """A threaded request: where its conversation is kept, and what it was sent with."""

    engine: Engine
    key: str
    fields: dict[str, Any]  # the create-only fields in force (system, tools)
    messages: list[dict[str, Any]]  # the whole conversation the reply answers

    def keep(self, reply: dict[str, Any]) -> None:
        """Store the conversation with `reply` under the reply's id."""
        turn = {"role": "assistant", "content": reply.get("content") or []}
        body = {**self.fields, "messages": [*self.messages, turn]}
        keep(
            responses_store.save,
            self.engine,
            rid=reply["id"],
            key_id=self.key,
            door="messages",
            created=time.time(),
            body=body,
        )


def _unsupported(message: str) -> ThreadError:
    return ThreadError(
        400, "invalid_request_error", message, "thread_unsupported_request", unsupported=["thread"]
    )


async def resolve(gateway: Any, body: dict[str, Any], thread: Any) -> Thread | None:
    """The request's thread (None without one); a `continue` fills `body` from the store."""
    if thread is None:
        return None
    kind = thread.get("type") if isinstance(thread, dict) else None
    if kind not in ("create", "continue"):
        raise _unsupported("'thread.type' must be 'create' or 'continue'.")
    engine = engine_of(gateway)
    if engine is None:
        raise _unsupported(
            "This gateway keeps no store ([store] enabled = false), so it cannot hold threads; "
            "send the whole conversation without 'thread'."
        )
    key = namespace()
    if kind == "continue":
        previous = thread.get("previous_message_id")
        stored = None
        if isinstance(previous, str):
            stored = await in_thread(responses_store.load, engine, previous, key, "messages")
        if stored is None:
            raise ThreadError(
                404,
                "not_found_error",
                f"No thread holds a message with id {previous!r}.",
                "thread_not_found",
            )
        for name in CREATE_ONLY:
            if body.get(name) is None and stored.body.get(name) is not None:
                body[name] = stored.body[name]
        body["messages"] = [*stored.body["messages"], *(body.get("messages") or [])]
    fields = {name: body[name] for name in CREATE_ONLY if body.get(name) is not None}
    return Thread(engine, key, fields, list(body["messages"]))


class ThreadTranslator(MessagesTranslator):
    """The Messages translator that keeps the reply (whole, or put back together from the
    events it sent) on the request's thread."""

    def __init__(self, thread: Thread, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.thread = thread
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}

    def whole(self, chat: dict[str, Any]) -> bytes:
        out = super().whole(chat)
        self.thread.keep(orjson.loads(out))
        return out

    def _piece(self, piece: Piece) -> list[bytes]:
        out = super()._piece(piece)
        for event in out:
            self._read(event)
        return out

    def _done(self) -> list[bytes]:
        out = super()._done()
        content = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block["type"] == "tool_use":
                block["input"] = input_of(self._json.get(index, ""))
            content.append(block)
        self.thread.keep({"id": self.mid, "content": content})
        return out

    def _read(self, event: bytes) -> None:
        """Fold one sent event into the reply's blocks."""
        for line in event.split(b"\n"):
            if not line.startswith(b"data: "):
                continue
            data = orjson.loads(line[6:])
            if data.get("type") == "content_block_start":
                self._blocks[data["index"]] = dict(data["content_block"])
            elif data.get("type") == "content_block_delta":
                block, delta = self._blocks[data["index"]], data["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "input_json_delta":
                    self._json[data["index"]] = (
                        self._json.get(data["index"], "") + delta["partial_json"]
                    )
