"""Chat SSE, read back: the relay's chat-completions stream cut into events for a translator.

The relay hands a translator whole events (`data: {...}`, `data: [DONE]`, comments, or an OpenAI
error event when the upstream broke mid-stream). `ChatEvents` keeps a buffer anyway, so a block
boundary inside an event is harmless, and yields one `Event` per SSE event. `Piece` is what one
chunk's first choice carried, in the shape every door needs. `ChatStream` is the feed loop both
doors' translators share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.serving.tap import cut_events


@dataclass(slots=True)
class Event:
    kind: str  # chunk | done | error | comment
    data: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""


@dataclass(slots=True)
class ToolDelta:
    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True)
class Piece:
    """The first choice of one chat chunk, plus the chunk's usage."""

    reasoning: str = ""
    content: str = ""
    tools: list[ToolDelta] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: Any = None
    usage: dict[str, Any] | None = None
    model: str | None = None


class ChatEvents:
    """Bytes in, SSE events out."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, block: bytes) -> list[Event]:
        whole, self._buffer = cut_events(self._buffer, block)
        if not whole:
            return []
        return [e for raw in whole[:-2].split(b"\n\n") if (e := _event(raw)) is not None]


class ChatStream(ABC):
    """A door's stream translator: SSE comments (keep-alives) pass through, also after the end;
    the door's opening events come before its first other event; a chunk's `Piece`, the end
    (`[DONE]`) and an error each go to the door; events after the door's last are dropped."""

    def __init__(self) -> None:
        self._events = ChatEvents()
        self._started = self._ended = False

    def feed(self, block: bytes) -> bytes:
        out: list[bytes] = []
        for event in self._events.feed(block):
            if event.kind == "comment":
                out.append(event.raw + b"\n\n")
                continue
            if self._ended:
                continue
            if not self._started:
                out += self._start()
            if event.kind == "chunk":
                out += self._piece(piece_of(event.data))
            elif event.kind == "done":
                out += self._done()
            else:
                out += self._failed(event.data.get("error") or {})
        return b"".join(out)

    @abstractmethod
    def _start(self) -> list[bytes]:
        """The stream's opening events; sets `_started`."""

    @abstractmethod
    def _piece(self, piece: Piece) -> list[bytes]: ...

    @abstractmethod
    def _done(self) -> list[bytes]:
        """The events of the stream's end; sets `_ended`."""

    @abstractmethod
    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        """The events of a failed stream, from an OpenAI error object; sets `_ended`."""


def _event(raw: bytes) -> Event | None:
    payload = None
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
    if payload is None:
        return Event("comment", raw=raw) if raw.startswith(b":") else None
    if payload == b"[DONE]":
        return Event("done")
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return Event("error", {"error": {"message": "malformed event from the relay"}})
    if not isinstance(obj, dict):
        return None
    if "error" in obj and "choices" not in obj:
        return Event("error", obj)
    return Event("chunk", obj)


def piece_of(chunk: dict[str, Any]) -> Piece:
    """What the first choice of a chat.completion.chunk carried."""
    piece = Piece(usage=chunk.get("usage") or None, model=chunk.get("model"))
    for choice in chunk.get("choices") or ():
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        piece.reasoning = reasoning_of(delta)
        piece.content = delta.get("content") or ""
        for i, call in enumerate(delta.get("tool_calls") or ()):
            fn = call.get("function") or {}
            piece.tools.append(
                ToolDelta(
                    call.get("index", i), call.get("id"), fn.get("name"), fn.get("arguments") or ""
                )
            )
        piece.logprobs = (choice.get("logprobs") or {}).get("content") or []
        piece.finish_reason = choice.get("finish_reason")
        piece.stop_reason = choice.get("stop_reason")
    return piece


def first_message(chat: dict[str, Any]) -> tuple[dict[str, Any], str | None, Any]:
    """(message, finish_reason, stop_reason) of a chat.completion's first choice."""
    choices = chat.get("choices") or [{}]
    choice = choices[0]
    return choice.get("message") or {}, choice.get("finish_reason"), choice.get("stop_reason")


def reasoning_of(message: dict[str, Any]) -> str:
    return message.get("reasoning_content") or message.get("reasoning") or ""


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One named SSE event, as both the Responses and the Messages APIs frame them."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def record_usage(record: Any) -> dict[str, Any]:
    """The record's token counts as a chat `usage` object (the record is the source of truth:
    it holds the upstream's usage, or the gateway's estimate when the upstream sent none)."""
    return chat_usage(
        record.prompt_tokens,
        record.cached_tokens,
        record.completion_tokens,
        record.reasoning_tokens,
    )


def tokens_of(usage: dict[str, Any] | None) -> tuple[int, int, int, int]:
    """(prompt, cached, completion, reasoning) of a chat `usage` object."""
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return (
        int(usage.get("prompt_tokens") or 0),
        int(cached),
        int(usage.get("completion_tokens") or 0),
        int(reasoning),
    )


def chat_usage(prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
