"""The Messages door's translator: chat answers rendered as Anthropic messages and stream events.

`MessagesTranslator` is the relay's `Translator` for `POST /v1/messages`. A whole answer goes
through `messages.render`. A stream is rebuilt as Anthropic sends it: `message_start`, `ping`, then
one content block at a time (`thinking`, `text`, `tool_use`) opened by `content_block_start`, filled
by `thinking_delta` / `text_delta` / `input_json_delta` and closed by `content_block_stop`, then
`message_delta` (stop_reason, stop_sequence, the record's usage, the context edits applied) and
`message_stop`. `message_start` carries the prompt's tokens as the gateway knows them before the
upstream says: the upstream tokenizer's count where dispatch made one
(gateway/serving/tokenizer.py), else the estimate; `message_delta` the final figure. Reasoning asked
for with `display: omitted` is not sent; tool_use ids are the door's (`translation.client_id`).
An upstream that broke mid-stream ends the stream with an `error` event.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from gateway.edge.doors.chunks import ChatStream, Piece, record_usage, sse
from gateway.edge.doors.messages.render import render, stop_of, usage_of
from gateway.edge.doors.messages.translation import Translation, client_id
from gateway.ledger.record import Record
from gateway.ledger.truncation import length_cause
from gateway.serving.accounting import prompt_estimate


class MessagesTranslator(ChatStream):
    def __init__(
        self, request: dict[str, Any], record: Record, translation: Translation | None = None
    ):
        super().__init__()
        self.request = request
        self.record = record
        self.translation = translation or Translation(chat={})
        self.mid = "msg_" + os.urandom(12).hex()
        self._index = -1  # index of the last block opened
        self._open: str | None = None  # type of the open block
        self._tools: dict[int, int] = {}  # chat tool-call index -> block index
        self._finish: str | None = None
        self._stop_reason: Any = None

    # -- the Translator protocol -----------------------------------------------------------
    def whole(self, chat: dict[str, Any]) -> bytes:
        chat = {**chat, "usage": record_usage(self.record)}
        cut = length_cause(self.record) == "upstream"
        return orjson.dumps(render(chat, self.request, self.mid, self.translation, cut))

    # -- events ----------------------------------------------------------------------------
    def _start(self) -> list[bytes]:
        self._started = True
        message: dict[str, Any] = {
            "id": self.mid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.request.get("model"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._prompt_tokens(), "output_tokens": 0},
        }
        return [
            sse("message_start", {"type": "message_start", "message": message}),
            sse("ping", {"type": "ping"}),
        ]

    def _prompt_tokens(self) -> int:
        counted = self.record.prompt_counted
        if counted is not None:
            return counted
        return prompt_estimate(self.translation.chat) if self.translation.chat else 0

    def _piece(self, piece: Piece) -> list[bytes]:
        out: list[bytes] = []
        if piece.reasoning and not self.translation.omit_thinking:
            out += self._ensure("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": piece.reasoning}))
        if piece.content:
            out += self._ensure("text", {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": piece.content}))
        for tool in piece.tools:
            if tool.index not in self._tools:
                block = {
                    "type": "tool_use",
                    "id": client_id(tool.id),
                    "name": tool.name or "",
                    "input": {},
                }
                out += self._ensure("tool_use", block, force=True)
                self._tools[tool.index] = self._index
            if tool.arguments and self._tools[tool.index] == self._index:
                out.append(
                    self._delta({"type": "input_json_delta", "partial_json": tool.arguments})
                )
        if piece.finish_reason:
            self._finish = piece.finish_reason
            self._stop_reason = piece.stop_reason
        return out

    def _ensure(self, kind: str, block: dict[str, Any], force: bool = False) -> list[bytes]:
        if self._open == kind and not force:
            return []
        out = self._close()
        self._index += 1
        self._open = kind
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": self._index, "content_block": block},
            )
        )
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._index, "delta": delta},
        )

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _done(self) -> list[bytes]:
        # A stream the upstream cut before it finished reaches the door as an error event
        # (gateway/serving/stream_relay.py); `[DONE]` here is the upstream saying it finished,
        # with or without a finish reason (then `end_turn`), as the record says.
        out = self._close()
        self._ended = True
        cut = self._finish == "length" and length_cause(self.record) == "upstream"
        stops = self.request.get("stop_sequences") or []
        reason, sequence = stop_of(self._finish, self._stop_reason, stops, cut)
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_of(record_usage(self.record)),
        }
        if self.translation.applied_edits:
            delta["context_management"] = {"applied_edits": self.translation.applied_edits}
        return [
            *out,
            sse("message_delta", delta),
            sse("message_stop", {"type": "message_stop"}),
        ]

    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        self._ended = True
        message = error.get("message") or "the upstream failed mid-stream"
        # A gateway that is shutting down is "overloaded" in Anthropic's words (its 529).
        kind = "overloaded_error" if error.get("type") == "service_unavailable" else "api_error"
        return [sse("error", {"type": "error", "error": {"type": kind, "message": message}})]
