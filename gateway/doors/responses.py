"""The Responses door: an OpenAI Responses API request as chat completions, and the answer back.

`chat_request` turns a validated Responses body into a chat-completions body (the internal
request every door shares). The answer side is in `response_object` (whole) and
`responses_stream` (streamed).
"""

from __future__ import annotations

from typing import Any

from gateway.doors.protocol_responses import EXTENSIONS
from gateway.errors import BadRequest
from gateway.profile import SAMPLING

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


# ---------------------------------------------------------------- request: Responses -> chat


def native_request(body: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """The Responses request as relayed to an upstream that implements the API: the client's
    body, plus the profile's sampling and thinking mode (from the chat translation `chat`, where
    the profile was applied), so both paths send the same explicit parameters."""
    native = dict(body)
    for name in SAMPLING:  # filled in by the profile; vLLM takes them top-level too
        if native.get(name) is None and chat.get(name) is not None:
            native[name] = chat[name]
    if chat.get("chat_template_kwargs") and native.get("chat_template_kwargs") is None:
        native["chat_template_kwargs"] = chat["chat_template_kwargs"]
    return native


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body for a validated Responses request."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    messages += messages_of(body["input"])
    if not messages:
        raise BadRequest("'input' holds no message to answer.", param="input")
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    for ours, theirs in (
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    for name in EXTENSIONS:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = (body.get("text") or {}).get("format")
    if fmt:
        response_format = _response_format(fmt)
        if response_format:
            chat["response_format"] = response_format
    effort = (body.get("reasoning") or {}).get("effort")
    if effort == "none":
        chat["chat_template_kwargs"] = {
            **chat.get("chat_template_kwargs", {}),
            "enable_thinking": False,
        }
    elif effort:
        chat["reasoning_effort"] = effort
    if "message.output_text.logprobs" in (body.get("include") or ()) or body.get("top_logprobs"):
        chat["logprobs"] = True
        chat["top_logprobs"] = body.get("top_logprobs") or 0
    return chat


def messages_of(items: str | list[Any]) -> list[dict[str, Any]]:
    """Chat messages for a Responses `input` (a string, or a list of input items)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"'{where}' must be an object.", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where, reasoning))
        elif kind == "function_call":
            _need(item, where, "call_id", "name")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or ""},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append(
                    _assistant(
                        {"role": "assistant", "content": None, "tool_calls": [call]}, reasoning
                    )
                )
        elif kind == "function_call_output":
            _need(item, where, "call_id", "output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": _text(item["output"], f"{where}.output"),
                }
            )
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            reasoning.append("".join(p.get("text", "") for p in parts if isinstance(p, dict)))
        elif kind == "item_reference":
            raise BadRequest(
                f"'{where}': items of type 'item_reference' need stored responses, which this "
                "gateway does not keep; send the item itself.",
                param=where,
            )
        else:
            raise BadRequest(
                f"'{where}': input items of type {kind!r} are not supported.", param=f"{where}.type"
            )
    return out


def _need(item: dict[str, Any], where: str, *names: str) -> None:
    for name in names:
        if item.get(name) is None:
            raise BadRequest(f"'{where}.{name}' is required.", param=f"{where}.{name}")


def _assistant(message: dict[str, Any], reasoning: list[str]) -> dict[str, Any]:
    if reasoning:
        message["reasoning_content"] = message["reasoning"] = "".join(reasoning)
        reasoning.clear()
    return message


def _message(item: dict[str, Any], where: str, reasoning: list[str]) -> dict[str, Any]:
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise BadRequest(f"'{where}.role' must be one of {sorted(ROLES)}.", param=f"{where}.role")
    content = item.get("content")
    if role != "user" or isinstance(content, str):
        return _assistant(
            {"role": role, "content": _text(content, f"{where}.content")},
            reasoning if role == "assistant" else [],
        )
    parts = [_part(p, f"{where}.content[{j}]") for j, p in enumerate(content or [])]
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "\n".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


def _part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part.get("text") or part.get("refusal") or ""}
    if kind == "input_image" and part.get("image_url"):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise BadRequest(
        f"'{where}': content of type {kind!r} is not supported (text and "
        "input_image with an image_url are).",
        param=where,
    )


def _text(content: Any, where: str) -> str:
    """Plain text of a non-user message or a tool output (images are only for user turns)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or a list of content parts.", param=where)
    texts = []
    for j, p in enumerate(content):
        part = _part(p, f"{where}[{j}]")
        if part["type"] != "text":
            raise BadRequest(
                f"'{where}[{j}]': images are only supported in user messages.",
                param=f"{where}[{j}]",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def _tool(tool: dict[str, Any], i: int) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        raise BadRequest(
            f"'tools[{i}]': tool type {kind!r} is not supported; only function "
            "tools are (the gateway runs no built-in tools).",
            param=f"tools[{i}].type",
        )
    if not isinstance(tool.get("name"), str):
        raise BadRequest(f"'tools[{i}].name' is required.", param=f"tools[{i}].name")
    fn = {
        k: tool[k]
        for k in ("name", "description", "parameters", "strict")
        if tool.get(k) is not None
    }
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest(
        f"'tool_choice' {choice!r} is not supported (auto, none, required or a "
        "named function are).",
        param="tool_choice",
    )


def _response_format(fmt: dict[str, Any]) -> dict[str, Any] | None:
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise BadRequest(f"'text.format' type {kind!r} is not supported.", param="text.format")
