"""The Responses API `response` object: built from a chat answer, and read back.

`render` turns a chat.completion into a `response` object (reasoning item, message item with
output_text, function_call items, usage); `chat_of` is its inverse, used to check that nothing is
lost in translation. The item builders are shared with the streaming translator, which assembles
the same object event by event.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.edge.doors.chunks import chat_usage, first_message, reasoning_of, tokens_of
from gateway.edge.doors.responses.tools import Tools, restored


def usage_of(chat_usage_obj: dict[str, Any] | None) -> dict[str, Any]:
    prompt, cached, completion, reasoning = tokens_of(chat_usage_obj)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning item; `encrypted_content` is null (what `include:
    ["reasoning.encrypted_content"]` gets: the reasoning is in `content`, replayable as is)."""
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "status": status,
        "content": [{"type": "reasoning_text", "text": text}],
        "encrypted_content": None,
    }


def output_text(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def message_item(
    item_id: str, text: str, logprobs: list[dict[str, Any]], status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [output_text(text, logprobs)],
    }


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def logprobs_of(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Chat `logprobs.content` entries as Responses output_text logprobs (the same fields)."""

    def one(e: dict[str, Any]) -> dict[str, Any]:
        return {
            "token": e.get("token", ""),
            "logprob": e.get("logprob", 0.0),
            "bytes": e.get("bytes") or [],
        }

    return [
        one(e) | {"top_logprobs": [one(t) for t in e.get("top_logprobs") or ()]}
        for e in entries or ()
    ]


def response_object(
    request: dict[str, Any],
    chat_body: dict[str, Any],
    rid: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
    truncated: bool = False,
) -> dict[str, Any]:
    """The `response` object; sampling fields echo what was actually sent upstream, `model` is
    the name the client asked for (not the upstream's id). An answer that stopped at the
    client's own `max_output_tokens` is `completed` with `incomplete_details` saying so (the
    answer is whole as far as the client asked); one the upstream cut (its window, its own
    limit) is `incomplete`, as OpenAI ends it, with the same details."""
    reasoning = request.get("reasoning") or {}
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": False,
        "background": False,
        "temperature": chat_body.get("temperature"),
        "top_p": chat_body.get("top_p"),
        "text": {"format": (request.get("text") or {}).get("format") or {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "truncation": "disabled",
        "usage": usage,
        "metadata": request.get("metadata") or {},
    }


def render(
    chat: dict[str, Any],
    request: dict[str, Any],
    chat_body: dict[str, Any],
    rid: str,
    created: int,
    tools: Tools | None = None,
    upstream_cut: bool = False,
) -> dict[str, Any]:
    """A chat.completion as a Responses `response` object (calls restored through `tools`);
    `upstream_cut`: an answer that stopped at its length was cut by the upstream, not by the
    client's cap (`gateway.ledger.truncation.length_cause`), and is `incomplete`."""
    message, finish, _ = first_message(chat)
    suffix = rid.removeprefix("resp_")
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(f"rs_{suffix}", reasoning))
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if text or not calls:
        logprobs = logprobs_of(
            ((chat.get("choices") or [{}])[0].get("logprobs") or {}).get("content")
        )
        output.append(message_item(f"msg_{suffix}", text, logprobs))
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        item = call_item(
            f"fc_{suffix}_{i}",
            call.get("id") or f"call_{suffix}_{i}",
            fn.get("name") or "",
            fn.get("arguments") or "",
        )
        output.append(restored(item, tools or Tools()))
    return response_object(
        request,
        chat_body,
        rid,
        created,
        "incomplete" if finish == "length" and upstream_cut else "completed",
        output,
        usage_of(chat.get("usage")),
        truncated=finish == "length",
    )


def chat_of(response: dict[str, Any]) -> dict[str, Any]:
    """A Responses `response` object read back as a chat.completion (the inverse of `render`)."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        if item["type"] == "message":
            texts += [p.get("text", "") for p in item["content"] if p["type"] == "output_text"]
        elif item["type"] == "reasoning":
            reasoning += [p["text"] for p in item.get("content") or ()]
        elif item["type"] == "function_call":
            calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    cut = response["status"] == "incomplete" or bool(response.get("incomplete_details"))
    finish = "tool_calls" if calls else "length" if cut else "stop"
    usage = response.get("usage") or {}
    return {
        "object": "chat.completion",
        "model": response.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": chat_usage(
            usage.get("input_tokens", 0),
            usage.get("input_tokens_details", {}).get("cached_tokens", 0),
            usage.get("output_tokens", 0),
            usage.get("output_tokens_details", {}).get("reasoning_tokens", 0),
        ),
    }
