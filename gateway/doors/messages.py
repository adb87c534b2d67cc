"""The Messages door: an Anthropic Messages API request as chat completions, and the answer back.

`chat_request` turns a validated Messages body into a chat-completions body; `render` turns a
chat.completion into an Anthropic `message` (reasoning as a `thinking` block, tool calls as
`tool_use` blocks, finish_reason as stop_reason); `chat_of` is its inverse, used to check that
nothing is lost. `error_response` renders any gateway error in Anthropic's error shape. The
streaming side is in `messages_stream`.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.doors.chunks import chat_usage, first_message, reasoning_of, tokens_of
from gateway.doors.protocol_messages import EXTENSIONS
from gateway.errors import BadRequest, GatewayError
from gateway.upstream import THINKING_BUDGET

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
# Key under which tool arguments that are not a JSON object travel in a tool_use `input`.
RAW_ARGUMENTS = "_raw_arguments"


def error_body(error: GatewayError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error_body(error)), status_code=error.status, media_type="application/json"
    )


# ---------------------------------------------------------------- request: Messages -> chat


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body for a validated Messages request."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _system(system)})
    for i, message in enumerate(body["messages"]):
        where = f"messages.{i}.content"
        if message["role"] == "user":
            messages += _user(message["content"], where)
        else:
            messages.append(_assistant(message["content"], where))
    if not messages:
        raise BadRequest("messages: there is no message to answer.", param="messages")
    chat: dict[str, Any] = {
        "model": body["model"],
        "messages": messages,
        "max_tokens": body["max_tokens"],
    }
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    for name in ("temperature", "top_p", "top_k", *EXTENSIONS):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    if body.get("tool_choice"):
        _tool_choice(body["tool_choice"], chat)
    thinking = body.get("thinking")
    if thinking:
        kwargs = dict(chat.get("chat_template_kwargs") or {})
        kwargs["enable_thinking"] = thinking["type"] != "disabled"
        chat["chat_template_kwargs"] = kwargs
        if thinking["type"] == "enabled" and thinking.get("budget_tokens") is not None:
            # vLLM's name; `upstream.body_for` says it in each upstream's dialect.
            chat[THINKING_BUDGET] = thinking["budget_tokens"]
    return chat


def _system(system: str | list[dict[str, Any]]) -> str:
    if isinstance(system, str):
        return system
    texts = []
    for i, block in enumerate(system):
        if block.get("type") != "text":
            raise BadRequest(f"system.{i}: only text blocks are supported.", param=f"system.{i}")
        texts.append(block.get("text", ""))
    return "\n".join(texts)


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise BadRequest(
            f"{where}: image source type {source.get('type')!r} is not supported "
            "(base64 and url are).",
            param=where,
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _user(content: str | list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Tool results become tool messages (first: they answer the last turn), then a user turn."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content)):
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image(block, f"{where}.{j}"))
        elif kind == "tool_result":
            text, images = _tool_result(block.get("content"), f"{where}.{j}.content")
            tools.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}
            )
            parts += images
        else:
            raise BadRequest(
                f"{where}.{j}: content block type {kind!r} is not supported in user "
                "turns (text, image, tool_result are).",
                param=f"{where}.{j}",
            )
    out = list(tools)
    if parts and all(p["type"] == "text" for p in parts):
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _tool_result(content: Any, where: str) -> tuple[str, list[dict[str, Any]]]:
    if content is None or isinstance(content, str):
        return content or "", []
    texts, images = [], []
    for j, block in enumerate(content):
        if block.get("type") == "text":
            texts.append(block.get("text", ""))
        elif block.get("type") == "image":
            images.append(_image(block, f"{where}.{j}"))
        else:
            raise BadRequest(
                f"{where}.{j}: tool_result blocks of type {block.get('type')!r} are not supported.",
                param=f"{where}.{j}",
            )
    return "\n".join(texts), images


def _assistant(content: str | list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(_blocks(content)):
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thoughts.append(block.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue  # opaque to any upstream but its issuer
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": arguments_of(block.get("input")),
                    },
                }
            )
        else:
            raise BadRequest(
                f"{where}.{j}: content block type {kind!r} is not supported in assistant turns.",
                param=f"{where}.{j}",
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thoughts:
        message["reasoning_content"] = message["reasoning"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def arguments_of(tool_input: Any) -> str:
    if isinstance(tool_input, dict) and set(tool_input) == {RAW_ARGUMENTS}:
        return str(tool_input[RAW_ARGUMENTS])
    return orjson.dumps(tool_input if tool_input is not None else {}).decode()


def input_of(arguments: str) -> dict[str, Any]:
    """A tool call's argument string as a tool_use `input` object."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def _tool(tool: dict[str, Any], i: int) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise BadRequest(
            f"tools.{i}: server tool type {tool['type']!r} is not supported; only "
            "client tools (name, description, input_schema) are.",
            param=f"tools.{i}",
        )
    if not isinstance(tool.get("name"), str):
        raise BadRequest(f"tools.{i}.name: Field required", param=f"tools.{i}.name")
    fn: dict[str, Any] = {
        "name": tool["name"],
        "parameters": tool.get("input_schema") or {"type": "object"},
    }
    if tool.get("description"):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _tool_choice(choice: dict[str, Any], chat: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and choice.get("name"):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise BadRequest(f"tool_choice: type {kind!r} is not supported.", param="tool_choice")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


# ---------------------------------------------------------------- answer: chat -> Messages


def stop_of(finish: str | None, stop_reason: Any, stops: list[str]) -> tuple[str, str | None]:
    """(Anthropic stop_reason, stop_sequence) for a chat finish_reason (+ vLLM's stop_reason)."""
    if finish == "length":
        return "max_tokens", None
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


def render(chat: dict[str, Any], request: dict[str, Any], mid: str) -> dict[str, Any]:
    """A chat.completion as an Anthropic `message`."""
    message, finish, stop_reason = first_message(chat)
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": fn.get("name"),
                "input": input_of(fn.get("arguments") or ""),
            }
        )
    reason, sequence = stop_of(finish, stop_reason, request.get("stop_sequences") or [])
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": chat.get("model") or request.get("model"),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(chat.get("usage")),
    }


def chat_of(message: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic `message` read back as a chat.completion (the inverse of `render`)."""
    reply = _assistant(message["content"], "content")
    reply.pop("reasoning", None)
    finish = {"max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}.get(
        message["stop_reason"], "stop"
    )
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
