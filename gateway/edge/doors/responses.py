"""The Responses door: an OpenAI Responses API request as chat completions, and the answer back.

`chat_request` turns a validated Responses body into a chat-completions body (the internal
request every door shares). The answer side is in `response_object` (whole) and
`responses_stream` (streamed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gateway.edge.doors.protocol_responses import EXTENSIONS
from gateway.edge.doors.responses_tools import Tools, history_call, tool_choice, tools_of
from gateway.errors import BadRequest
from gateway.serving.profile import SAMPLING

# How engines word a prompt longer than the served window: vLLM ("maximum context length"),
# llama.cpp ("exceeds the available context size", exceed_context_size_error), OpenAI-style APIs.
CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context length|context window|context_length_exceeded|"
    r"exceed_context_size|exceeds the available context|prompt is too long|too many tokens",
    re.IGNORECASE,
)
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


def context_overflow(message: str) -> bool:
    """Whether an upstream's error message says the prompt did not fit its context window."""
    return bool(CONTEXT_OVERFLOW.search(message))


def context_error(error: BadRequest) -> BadRequest:
    """An upstream's refusal as the door answers it: code `context_length_exceeded` when the
    prompt did not fit (Codex then says it ran out of room, and does not retry)."""
    if (error.code or "").startswith("upstream_") and context_overflow(error.message):
        return BadRequest(error.message, param="input", code="context_length_exceeded")
    return error


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


@dataclass(slots=True)
class Translation:
    """A Responses request as chat completions: the body, the tool map back, what was dropped."""

    chat: dict[str, Any]
    tools: Tools
    dropped: list[str] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """Nothing in the request needed more than relaying: no field dropped, no namespace or
        custom tool renamed. Only such a request goes as is to an upstream that implements the
        Responses API; a harness's (Codex's hosted and namespace tools) is served translated,
        where the door restores names, names the public model and sends heartbeats."""
        return not self.dropped and all(
            o.namespace is None and not o.custom for o in self.tools.origins.values()
        )


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body for a validated Responses request."""
    return translate(body).chat


def translate(body: dict[str, Any]) -> Translation:
    """The chat-completions body for a validated Responses request, with its tool map."""
    tools = tools_of(body.get("tools"))
    dropped = list(tools.dropped)
    messages = messages_of(body["input"], tools, dropped)
    if body.get("instructions"):
        messages = _merged_system([{"role": "system", "content": body["instructions"]}, *messages])
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
        *((name, name) for name in EXTENSIONS),
    ):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    _tools_into(chat, body, tools)
    _text_into(chat, body, dropped)
    _reasoning_into(chat, body)
    if "message.output_text.logprobs" in (body.get("include") or ()) or body.get("top_logprobs"):
        chat["logprobs"] = True
        chat["top_logprobs"] = body.get("top_logprobs") or 0
    return Translation(chat, tools, list(dict.fromkeys(dropped)))


def _tools_into(chat: dict[str, Any], body: dict[str, Any], tools: Tools) -> None:
    if tools.functions:  # an empty list (Codex's compaction turn) is not forwarded
        chat["tools"] = tools.functions
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    choice = tool_choice(body.get("tool_choice"), tools) if "tool_choice" in body else None
    if choice is not None:
        chat["tool_choice"] = choice


def _text_into(chat: dict[str, Any], body: dict[str, Any], dropped: list[str]) -> None:
    """`text.format` as chat's response_format; what chat has no field for, marked dropped."""
    text = body.get("text") or {}
    response_format = _response_format(text["format"]) if text.get("format") else None
    if response_format:
        chat["response_format"] = response_format
    if text.get("verbosity") is not None:
        dropped.append("text.verbosity")
    if body.get("context_management") is not None:
        dropped.append("context_management")


def _reasoning_into(chat: dict[str, Any], body: dict[str, Any]) -> None:
    effort = (body.get("reasoning") or {}).get("effort")
    if effort == "none":
        chat["chat_template_kwargs"] = {
            **chat.get("chat_template_kwargs", {}),
            "enable_thinking": False,
        }
    elif effort:
        chat["reasoning_effort"] = effort


def messages_of(
    items: str | list[Any], tools: Tools | None = None, dropped: list[str] | None = None
) -> list[dict[str, Any]]:
    """Chat messages for a Responses `input` (a string, or a list of input items). Developer and
    system turns, wherever they are, become one leading system message (chat templates take a
    system message first only); images of a tool output go to a user turn after the tool turns."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    tools = tools if tools is not None else Tools()
    dropped = dropped if dropped is not None else []
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []
    images: list[dict[str, Any]] = []  # from tool outputs, for the user turn after them
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"'{where}' must be an object.", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if images and kind not in ("function_call_output", "custom_tool_call_output"):
            out.append({"role": "user", "content": images})
            images = []
        if kind == "message":
            out.append(_message(item, where, reasoning, dropped))
        elif kind in ("function_call", "custom_tool_call"):
            _add_call(out, item, where, tools, reasoning)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            _need(item, where, "call_id", "output")
            text, pictures = _tool_output(item["output"], f"{where}.output", dropped)
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
            images += pictures
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            reasoning.append("".join(p.get("text", "") for p in parts if isinstance(p, dict)))
        else:
            dropped.append(_unsupported(kind, where))
    if images:
        out.append({"role": "user", "content": images})
    return _merged_system(out)


def _add_call(
    out: list[dict[str, Any]], item: dict[str, Any], where: str, tools: Tools, reasoning: list[str]
) -> None:
    """A function call of the history: onto the assistant turn before it, or a turn of its own
    (one that carries the reasoning before it)."""
    _need(item, where, "call_id", "name")
    call = history_call(item, tools)
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and not reasoning:
        last.setdefault("tool_calls", []).append(call)
    else:
        out.append(
            _assistant({"role": "assistant", "content": None, "tool_calls": [call]}, reasoning)
        )


def _unsupported(kind: Any, where: str) -> str:
    """The dropped mark of an input item chat has no turn for; an item reference the door did
    not resolve (`response_state.resolve` replaces each with its stored item) is refused."""
    if kind == "item_reference":
        raise BadRequest(
            f"'{where}': an 'item_reference' must name a stored item; send the item itself.",
            param=where,
        )
    known = kind in ("tool_search_call", "tool_search_output")
    return f"input[type={kind}]" if known else "input[type=*]"


def _merged_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    system = [m["content"] for m in messages if m["role"] == "system" and m["content"]]
    rest = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": "\n\n".join(system)}, *rest] if system else rest


def _need(item: dict[str, Any], where: str, *names: str) -> None:
    for name in names:
        if item.get(name) is None:
            raise BadRequest(f"'{where}.{name}' is required.", param=f"{where}.{name}")


def _assistant(message: dict[str, Any], reasoning: list[str]) -> dict[str, Any]:
    if reasoning:
        message["reasoning_content"] = message["reasoning"] = "".join(reasoning)
        reasoning.clear()
    return message


def _message(
    item: dict[str, Any], where: str, reasoning: list[str], dropped: list[str]
) -> dict[str, Any]:
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise BadRequest(f"'{where}.role' must be one of {sorted(ROLES)}.", param=f"{where}.role")
    content = item.get("content")
    if role != "user" or isinstance(content, str):
        text, pictures = _tool_output(content, f"{where}.content", dropped)
        if pictures:
            dropped.append("content[type=input_image] outside a user turn")
        return _assistant({"role": role, "content": text}, reasoning if role == "assistant" else [])
    if not isinstance(content, list):
        raise BadRequest(
            f"'{where}.content' must be a string or a list of content parts.",
            param=f"{where}.content",
        )
    parts = [
        p for j, raw in enumerate(content) if (p := _part(raw, f"{where}.content[{j}]", dropped))
    ]
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "\n".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


def _part(part: Any, where: str, dropped: list[str]) -> dict[str, Any] | None:
    """A content part as a chat part; None (dropped and marked) for a kind chat cannot carry."""
    if not isinstance(part, dict):
        raise BadRequest(f"'{where}' must be an object.", param=where)
    kind = part.get("type")
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part.get("text") or part.get("refusal") or ""}
    if kind == "input_image" and part.get("image_url"):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    dropped.append("content[type=input_file]" if kind == "input_file" else "content[type=*]")
    return None


def _tool_output(content: Any, where: str, dropped: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The text of a non-user turn or a tool output (text parts joined), and its images."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or a list of content parts.", param=where)
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for j, raw in enumerate(content):
        part = _part(raw, f"{where}[{j}]", dropped)
        if part is None:
            continue
        if part["type"] == "text":
            texts.append(part["text"])
        else:
            images.append(part)
    return "\n".join(texts), images


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
