"""The Messages door: chat answers rendered as Anthropic messages.

The request side is `translation` (re-exported here: `chat_request`). `render` turns a
chat.completion into an Anthropic `message` (reasoning as a `thinking` block unless the client
asked for it omitted, tool calls as `tool_use` blocks with `toolu_` ids, finish_reason as
stop_reason, the model name the client asked for); `chat_of` is its inverse, used to check that
nothing is lost. Errors in Anthropic's shape are `errors`'. The streaming side is in
`stream`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.edge.doors.chunks import chat_usage, first_message, reasoning_of, tokens_of
from gateway.edge.doors.messages.translation import (
    RAW_ARGUMENTS,
    Translation,
    arguments_of,
    assistant,
    chat_request,
    client_id,
)

__all__ = ["RAW_ARGUMENTS", "Translation", "arguments_of", "chat_request", "render", "chat_of"]

# ---------------------------------------------------------------- answer: chat -> Messages


def input_of(arguments: str) -> dict[str, Any]:
    """A tool call's argument string as a tool_use `input` object."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def stop_of(
    finish: str | None, stop_reason: Any, stops: list[str], upstream_cut: bool = False
) -> tuple[str, str | None]:
    """(Anthropic stop_reason, stop_sequence) for a chat finish_reason (+ vLLM's stop_reason).
    An answer that stopped at its length is `max_tokens` when it reached the client's own
    `max_tokens`, `model_context_window_exceeded` when the upstream cut it (`upstream_cut`:
    the window, or the cap the gateway clamped to it; `gateway.ledger.truncation`)."""
    if finish == "length":
        return ("model_context_window_exceeded" if upstream_cut else "max_tokens"), None
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "content_filter":
        return "refusal", None
    if isinstance(stop_reason, str) and stop_reason in stops:
        return "stop_sequence", stop_reason
    return "end_turn", None


def usage_of(chat_usage_obj: dict[str, Any] | None) -> dict[str, Any]:
    """Anthropic usage: input_tokens exclude the cache reads, which are counted apart."""
    prompt, cached, completion, reasoning = tokens_of(chat_usage_obj)
    return {
        "input_tokens": prompt - cached,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": completion,
        "output_tokens_details": {"thinking_tokens": reasoning},
    }


def render(
    chat: dict[str, Any],
    request: dict[str, Any],
    mid: str,
    translation: Translation | None = None,
    upstream_cut: bool = False,
) -> dict[str, Any]:
    """A chat.completion as an Anthropic `message` (`upstream_cut`: see `stop_of`)."""
    message, finish, stop_reason = first_message(chat)
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning and not (translation and translation.omit_thinking):
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": client_id(call.get("id")),
                "name": fn.get("name"),
                "input": input_of(fn.get("arguments") or ""),
            }
        )
    stops = request.get("stop_sequences") or []
    reason, sequence = stop_of(finish, stop_reason, stops, upstream_cut)
    out = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": request.get("model") or chat.get("model"),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(chat.get("usage")),
    }
    if translation is not None and translation.applied_edits:
        out["context_management"] = {"applied_edits": translation.applied_edits}
    return out


def chat_of(message: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic `message` read back as a chat.completion (the inverse of `render`)."""
    reply = assistant(message["content"], "content")
    reply.pop("reasoning", None)
    finish = {
        "max_tokens": "length",
        "model_context_window_exceeded": "length",
        "tool_use": "tool_calls",
        "refusal": "content_filter",
    }.get(message["stop_reason"], "stop")
    choice = {
        "index": 0,
        "message": reply,
        "finish_reason": finish,
        "stop_reason": message.get("stop_sequence"),
    }
    usage = message["usage"]
    cached = usage.get("cache_read_input_tokens") or 0
    return {
        "object": "chat.completion",
        "model": message.get("model"),
        "choices": [choice],
        "usage": chat_usage(
            usage["input_tokens"] + cached,
            cached,
            usage["output_tokens"],
            (usage.get("output_tokens_details") or {}).get("thinking_tokens", 0),
        ),
    }
