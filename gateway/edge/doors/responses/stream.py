"""The Responses door's translator: chat answers rendered as Responses objects and typed events.

`ResponsesTranslator` is the relay's `Translator` for `POST /v1/responses`. A whole answer goes
through `responses.render`. A stream is rebuilt event by event: `response.created` and
`response.in_progress`, then one output item at a time (reasoning, message, function calls) each
opened with `response.output_item.added` (+ `content_part.added`), filled by `…delta` events and
closed with `…done` events, then `response.completed` carrying the record's usage (also when the
answer stopped at the client's own `max_output_tokens`: `incomplete_details` says so), or
`response.incomplete` (status `incomplete`, reason `max_output_tokens`) when the upstream cut it
(its window or its own limit: `gateway.ledger.truncation.length_cause`), as OpenAI ends it. Calls
are restored through the request's tool map (`tools`): a namespaced call with `namespace`
and its bare name, a custom tool's as a `custom_tool_call`. An upstream that broke mid-stream ends
the stream with an `error` event and `response.failed`, whose `code` is `context_length_exceeded`
for a context overflow. During a silence of `heartbeat_s` the `heartbeats` task (run by the relay)
sends `response.in_progress`: Codex gives a stream up after 300 s without an event, and SSE comments
do not count.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.edge.doors.chunks import ChatStream, Piece, ToolDelta, record_usage, sse
from gateway.edge.doors.responses.render import (
    call_item,
    logprobs_of,
    message_item,
    output_text,
    reasoning_item,
    render,
    response_object,
    usage_of,
)
from gateway.edge.doors.responses.tools import Tools, custom_input, restored
from gateway.edge.doors.responses.translation import context_overflow
from gateway.ledger.record import Record
from gateway.ledger.truncation import length_cause

HEARTBEAT_S = 15.0


class ResponsesTranslator(ChatStream):
    def __init__(
        self,
        request: dict[str, Any],
        chat_body: dict[str, Any],
        record: Record,
        tools: Tools | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        super().__init__()
        self.request = request
        self.chat_body = chat_body
        self.record = record
        self.tools = tools or Tools()
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self.rid = "resp_" + os.urandom(12).hex()
        self.created = int(time.time())
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._text = ""
        self._logprobs: list[dict[str, Any]] = []
        self._tools: dict[int, dict[str, Any]] = {}
        self._arguments: dict[str, str] = {}  # a custom call's function arguments, by item id
        self._finish: str | None = None

    # -- the Translator protocol -----------------------------------------------------------
    def whole(self, chat: dict[str, Any]) -> bytes:
        chat = {**chat, "usage": record_usage(self.record)}
        cut = length_cause(self.record) == "upstream"
        return orjson.dumps(
            render(chat, self.request, self.chat_body, self.rid, self.created, self.tools, cut)
        )

    async def heartbeats(self, write: Callable[[bytes], None]) -> None:
        """Until the stream ends: after each `heartbeat_s` without an event, write a
        `response.in_progress` (the stream's first events, if none was sent yet)."""
        while not self._ended:
            wait = self.heartbeat_s - (self._clock() - self._last)
            if wait > 0:
                await self._sleep(wait)
                continue
            if not self._started:
                write(b"".join(self._start()))
            else:
                write(self._emit("response.in_progress", response=self._response("in_progress")))

    # -- events ----------------------------------------------------------------------------
    def _emit(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        self._last = self._clock()
        return sse(kind, data)

    def _response(
        self, status: str, usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return response_object(
            self.request,
            self.chat_body,
            self.rid,
            self.created,
            status,
            list(self._output),
            usage,
            error,
            truncated=self._finish == "length",
        )

    def _start(self) -> list[bytes]:
        self._started = True
        response = self._response("in_progress")
        return [
            self._emit("response.created", response=response),
            self._emit("response.in_progress", response=response),
        ]

    def _piece(self, piece: Piece) -> list[bytes]:
        out: list[bytes] = []
        if piece.reasoning:
            out += self._ensure("reasoning")
            self._text += piece.reasoning
            out.append(
                self._emit(
                    "response.reasoning_text.delta",
                    **self._where(),
                    content_index=0,
                    delta=piece.reasoning,
                )
            )
        if piece.content:
            out += self._ensure("message")
            self._text += piece.content
            logprobs = logprobs_of(piece.logprobs)
            self._logprobs += logprobs
            out.append(
                self._emit(
                    "response.output_text.delta",
                    **self._where(),
                    content_index=0,
                    delta=piece.content,
                    logprobs=logprobs,
                )
            )
        for tool in piece.tools:
            out += self._tool(tool)
        if piece.finish_reason:
            self._finish = piece.finish_reason
        return out

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output) - 1}

    def _ensure(self, kind: str) -> list[bytes]:
        if self._open is not None and self._open["type"] == kind:
            return []
        out = self._close()
        suffix = f"{self.rid.removeprefix('resp_')}_{len(self._output)}"
        if kind == "reasoning":
            item = reasoning_item(f"rs_{suffix}", "", "in_progress") | {"content": []}
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = message_item(f"msg_{suffix}", "", [], "in_progress") | {"content": []}
            part = output_text("", [])
        self._open, self._text, self._logprobs = item, "", []
        self._output.append(item)
        out.append(
            self._emit("response.output_item.added", output_index=len(self._output) - 1, item=item)
        )
        out.append(
            self._emit("response.content_part.added", **self._where(), content_index=0, part=part)
        )
        return out

    def _tool(self, tool: ToolDelta) -> list[bytes]:
        out: list[bytes] = []
        item = self._tools.get(tool.index)
        if item is None:
            out += self._close()
            suffix = f"{self.rid.removeprefix('resp_')}_{len(self._output)}"
            item = restored(
                call_item(
                    f"fc_{suffix}", tool.id or f"call_{suffix}", tool.name or "", "", "in_progress"
                ),
                self.tools,
            )
            if item["type"] == "custom_tool_call":
                self._arguments[item["id"]] = ""
            self._tools[tool.index] = self._open = item
            self._output.append(item)
            out.append(
                self._emit(
                    "response.output_item.added", output_index=len(self._output) - 1, item=item
                )
            )
        if tool.arguments and item["type"] == "custom_tool_call":
            self._arguments[item["id"]] += tool.arguments  # unwrapped once whole
            item["input"] = custom_input(self._arguments[item["id"]])
        elif tool.arguments:
            item["arguments"] += tool.arguments
            if item is self._open:  # a late fragment of an earlier call only fills the item
                out.append(
                    self._emit(
                        "response.function_call_arguments.delta",
                        **self._where(),
                        delta=tool.arguments,
                    )
                )
        return out

    def _close(self, failed: bool = False) -> list[bytes]:
        """The open item's `…done` events: `incomplete` when the answer was cut (its length, or
        the stream `failed` before it finished), else `completed`."""
        item = self._open
        if item is None:
            return []
        where = self._where()
        status = "incomplete" if failed or self._finish == "length" else "completed"
        out: list[bytes] = []
        if item["type"] == "custom_tool_call":
            out.append(
                self._emit("response.custom_tool_call_input.done", **where, input=item["input"])
            )
        elif item["type"] == "function_call":
            out.append(
                self._emit(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        elif item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": self._text}
            out.append(
                self._emit(
                    "response.reasoning_text.done", **where, content_index=0, text=self._text
                )
            )
            out.append(
                self._emit("response.content_part.done", **where, content_index=0, part=part)
            )
            item["content"] = [part]
        else:
            part = output_text(self._text, self._logprobs)
            out.append(
                self._emit(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=self._text,
                    logprobs=self._logprobs,
                )
            )
            out.append(
                self._emit("response.content_part.done", **where, content_index=0, part=part)
            )
            item["content"] = [part]
        item["status"] = status
        out.append(
            self._emit("response.output_item.done", output_index=where["output_index"], item=item)
        )
        self._open = None
        return out

    def _done(self) -> list[bytes]:
        out = self._close()
        self._ended = True
        usage = usage_of(record_usage(self.record))
        status = self._ending()
        return [*out, self._emit(f"response.{status}", response=self._response(status, usage))]

    def _ending(self) -> str:
        """How the stream ends: `incomplete` when the upstream cut the answer, else
        `completed` (`gateway.ledger.truncation.length_cause`)."""
        cut = self._finish == "length" and length_cause(self.record) == "upstream"
        return "incomplete" if cut else "completed"

    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        out = self._close(failed=True)
        self._ended = True
        message = error.get("message") or "the upstream failed mid-stream"
        code = error.get("code") or "upstream_failed"
        if context_overflow(message):
            code = "context_length_exceeded"
        failure = {"code": code, "message": message}
        return [
            *out,
            self._emit("error", code=code, message=message, param=None),
            self._emit("response.failed", response=self._response("failed", error=failure)),
        ]
