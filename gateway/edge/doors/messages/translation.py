"""The Messages door's request side: a validated Anthropic Messages body as chat completions.

`chat_request` applies the door's field policy (`protocol.POLICY`): context edits
first (`edits`), then one leading system message (the body's `system` and every
`role: system` turn, in order, without Claude Code's attribution block), tool results as `tool`
messages (their images in a user turn after them), deferred tools only once a `tool_reference`
names them, `output_config` as `reasoning_effort` / `response_format` (`max_tokens` is clamped
to each upstream's window at dispatch, `gateway/serving/adapt.py`). What it cannot serve it drops
and
names in `Translation.dropped`.

Tool-use ids: the client sees `toolu_<the upstream's id>`, or `toolu_h_<its hex>` where that id
has characters outside Anthropic's alphabet (llama.cpp's `Bash:12`); a replayed id is mapped
back, so the upstream sees its own ids in the history, without any state in the gateway.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.config import Config
from gateway.edge.doors.messages import edits
from gateway.edge.doors.messages.protocol import DROPPED, EXTENSIONS, KNOWN
from gateway.errors import BadRequest
from gateway.serving.upstream import THINKING_BUDGET

BILLING = "x-anthropic-billing-header:"
HEX_PREFIX = "toolu_h_"
SAFE = re.compile(r"[a-zA-Z0-9_-]+")
EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def client_id(upstream: str | None) -> str:
    """The tool_use id the client sees for an upstream tool call id."""
    if not upstream:
        return "toolu_" + os.urandom(12).hex()
    if SAFE.fullmatch(upstream) and not upstream.startswith("h_"):
        return "toolu_" + upstream
    return HEX_PREFIX + upstream.encode().hex()


def upstream_id(client: Any) -> Any:
    """The upstream's id for a tool_use id (the inverse of `client_id`); other ids lose only
    their `toolu_`, the same way in every turn."""
    if not isinstance(client, str):
        return client
    if client.startswith(HEX_PREFIX):
        try:
            return bytes.fromhex(client[len(HEX_PREFIX) :]).decode()
        except ValueError:
            return client
    return client.removeprefix("toolu_")


@dataclass(frozen=True, slots=True)
class Served:
    """What the route serving a request offers: whether it takes reasoning_effort."""

    effort: bool = False


def served_of(config: Config, model: str) -> Served:
    """What `model`'s route (an alias resolved) serves: `reasoning_effort` where the profile
    sets one or an upstream is an API."""
    name = config.resolve(model)
    if name is None:
        return Served()
    profile = config.profile_for(name)
    ups = [u for u in config.upstreams if u.name in config.models[name].names]
    effort = bool(profile and profile.reasoning_effort) or any(u.kind == "openai" for u in ups)
    return Served(effort)


@dataclass(slots=True)
class Translation:
    chat: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    applied_edits: list[dict[str, Any]] = field(default_factory=list)
    omit_thinking: bool = False


def session_of(body: dict[str, Any], header: str | None) -> str | None:
    """The session a request belongs to, for affinity: Claude Code's session id (in
    `metadata.user_id`, a JSON string, or its X-Claude-Code-Session-Id header), else the
    user id."""
    user = (body.get("metadata") or {}).get("user_id")
    if isinstance(user, str) and user.startswith("{"):
        try:
            parsed = orjson.loads(user)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("session_id"), str):
            return parsed["session_id"]
    if header:
        return header
    return user if isinstance(user, str) and user else None


def chat_request(body: dict[str, Any], served: Served | None = None) -> Translation:
    """The chat-completions body for a validated Messages request, and what the door did."""
    served = served or Served()
    body = {**body, "messages": orjson.loads(orjson.dumps(body["messages"]))}  # edits: a copy
    out = Translation(chat={})
    out.applied_edits, unknown = edits.apply(body)
    out.dropped += unknown
    out.dropped += [f for f in body if f not in KNOWN] + [f for f in DROPPED if f in body]
    tools = body.get("tools") or []
    chat: dict[str, Any] = {"model": body["model"], "messages": _messages(body, out.dropped)}
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    for name in ("temperature", "top_p", "top_k", *EXTENSIONS):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    _tools(body, tools, chat, out.dropped)
    _thinking(body, chat, out)
    _output_config(body, chat, served, out.dropped)
    # Clamped to each upstream's window at dispatch (gateway/serving/adapt.py: x-plumbline-clamped).
    chat["max_tokens"] = body["max_tokens"]
    out.chat = chat
    return out


def _messages(body: dict[str, Any], dropped: list[str]) -> list[dict[str, Any]]:
    """The chat turns: every system text (top-level and in turns) as one leading system
    message, then the user and assistant turns."""
    tools = body.get("tools") or []
    described = {t.get("name"): t for t in tools if isinstance(t, dict)}
    systems = [_system(body["system"])] if body.get("system") else []
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(body["messages"]):
        where = f"messages.{i}.content"
        if message["role"] == "system":
            systems.append(_system(message["content"], dropped))
        elif message["role"] == "user":
            messages += _user(message["content"], where, described, dropped)
        else:
            messages.append(_assistant(message["content"], where, dropped))
    if not messages:
        raise BadRequest("messages: there is no user or assistant turn.", param="messages")
    system = "\n\n".join(s for s in systems if s)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return messages


def _tools(
    body: dict[str, Any], tools: list[Any], chat: dict[str, Any], dropped: list[str]
) -> None:
    referenced = _referenced(body["messages"])
    functions = [
        f for i, t in enumerate(tools) if (f := _tool(t, i, referenced, dropped)) is not None
    ]
    if functions:
        chat["tools"] = functions
        if body.get("tool_choice"):
            _tool_choice(body["tool_choice"], chat)
    elif body.get("tool_choice"):
        dropped.append("tool_choice")  # no tool left to choose


def _thinking(body: dict[str, Any], chat: dict[str, Any], out: Translation) -> None:
    thinking = body.get("thinking")
    if not thinking:
        return
    out.omit_thinking = thinking.get("display") == "omitted"
    if thinking["type"] == "adaptive":
        return  # "may reason": the route's profile says whether it does
    kwargs = dict(chat.get("chat_template_kwargs") or {})
    kwargs["enable_thinking"] = thinking["type"] == "enabled"
    chat["chat_template_kwargs"] = kwargs
    if thinking["type"] == "enabled" and thinking.get("budget_tokens") is not None:
        # vLLM's name; `upstream.body_for` says it in each upstream's dialect.
        chat[THINKING_BUDGET] = thinking["budget_tokens"]


def _output_config(
    body: dict[str, Any], chat: dict[str, Any], served: Served, dropped: list[str]
) -> None:
    config = body.get("output_config") or {}
    effort = config.get("effort")
    if effort is not None:
        if served.effort:
            chat["reasoning_effort"] = EFFORT[effort]
        else:
            dropped.append("output_config.effort")
    form = config.get("format")
    if form is not None:
        if form.get("type") == "json_schema" and isinstance(form.get("schema"), dict):
            chat["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": form["schema"], "strict": True},
            }
        else:
            dropped.append("output_config.format")


def _text(content: Any, dropped: list[str]) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for block in content:
        if block.get("type") == "text":
            texts.append(block.get("text", ""))
        else:
            dropped.append(f"system[type={block.get('type')}]")
    return "\n".join(texts)


def _system(system: Any, dropped: list[str] | None = None) -> str:
    if isinstance(system, list):
        system = [b for b in system if not str(b.get("text", "")).startswith(BILLING)]
    return _text(system, dropped if dropped is not None else [])


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


def _referenced(messages: list[dict[str, Any]]) -> set[str]:
    """Tools some `tool_reference` in the history names (a deferred tool is loaded by it)."""
    names: set[str] = set()
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else ():
            inner = block.get("content") if block.get("type") == "tool_result" else [block]
            for b in inner if isinstance(inner, list) else ():
                if isinstance(b, dict) and b.get("type") == "tool_reference":
                    names.add(str(b.get("tool_name")))
    return names


def _reference(block: dict[str, Any], described: dict[Any, dict[str, Any]]) -> str:
    name = block.get("tool_name")
    tool = described.get(name) or {}
    text = f"Tool '{name}' is now available."
    if tool.get("description"):
        text += f" {tool['description']}"
    if tool.get("input_schema"):
        text += f"\nInput schema: {orjson.dumps(tool['input_schema']).decode()}"
    return text


def _user(
    content: str | list[dict[str, Any]],
    where: str,
    described: dict[Any, dict[str, Any]],
    dropped: list[str],
) -> list[dict[str, Any]]:
    """Tool results become tool messages (first: they answer the last turn), then a user turn."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content)):
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image(block, f"{where}.{j}"))
        elif kind == "tool_reference":
            parts.append({"type": "text", "text": _reference(block, described)})
        elif kind == "document" and (block.get("source") or {}).get("type") == "text":
            parts.append({"type": "text", "text": str(block["source"].get("data", ""))})
        elif kind == "tool_result":
            text, images = _tool_result(block, f"{where}.{j}.content", described, dropped)
            tools.append(
                {"role": "tool", "tool_call_id": upstream_id(block["tool_use_id"]), "content": text}
            )
            parts += images
        else:
            dropped.append(f"content[type={kind}]")
    out = list(tools)
    if parts and all(p["type"] == "text" for p in parts):
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _tool_result(
    block: dict[str, Any], where: str, described: dict[Any, dict[str, Any]], dropped: list[str]
) -> tuple[str, list[dict[str, Any]]]:
    content = block.get("content")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    for j, part in enumerate(content if isinstance(content, list) else ()):
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind == "image":
            images.append(_image(part, f"{where}.{j}"))
        elif kind == "tool_reference":
            texts.append(_reference(part, described))
        else:
            dropped.append(f"content[type={kind}]")
    text = "\n".join(texts)
    if block.get("is_error"):
        text = "Error: " + text
    return text, images


def assistant(content: str | list[dict[str, Any]], where: str) -> dict[str, Any]:
    """An assistant turn as a chat message (also how an answer is read back)."""
    return _assistant(content, where, [])


def _assistant(content: str | list[dict[str, Any]], where: str, dropped: list[str]) -> dict:
    texts, thoughts, calls = [], [], []
    for block in _blocks(content):
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
                    "id": upstream_id(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": arguments_of(block.get("input")),
                    },
                }
            )
        else:
            dropped.append(f"content[type={kind}]")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thoughts:
        message["reasoning_content"] = message["reasoning"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


# Key under which tool arguments that are not a JSON object travel in a tool_use `input`.
RAW_ARGUMENTS = "_raw_arguments"


def arguments_of(tool_input: Any) -> str:
    if isinstance(tool_input, dict) and set(tool_input) == {RAW_ARGUMENTS}:
        return str(tool_input[RAW_ARGUMENTS])
    return orjson.dumps(tool_input if tool_input is not None else {}).decode()


def _tool(
    tool: dict[str, Any], i: int, referenced: set[str], dropped: list[str]
) -> dict[str, Any] | None:
    if tool.get("type") not in (None, "custom"):
        dropped.append(f"tools[type={tool['type']}]")
        return None
    if tool.get("defer_loading") and tool.get("name") not in referenced:
        return None  # not shown to the model until a tool_reference loads it
    schema = dict(tool.get("input_schema") or {"type": "object"})
    schema.pop("$schema", None)
    fn: dict[str, Any] = {"name": tool["name"], "parameters": schema}
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
        raise BadRequest(f"tool_choice: type {kind!r} needs a `name`.", param="tool_choice")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False
