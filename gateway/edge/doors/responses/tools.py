"""The Responses door's tools as chat functions, and their calls back as Responses items.

Chat completions knows one tool type, the function. A Responses request also offers:

- ``namespace`` tools (Codex's ``multi_agent_v1``, MCP servers as ``mcp__<server>__``): each
  inner function becomes ``<ns>__<name>`` (``<ns><name>`` when the namespace already ends in
  ``__``), shortened with a hash past 64 characters or on a collision;
- ``custom`` (freeform) tools (Codex's ``apply_patch``): a function of one string ``input``.

`Tools` is the per-request map, built from the request's ``tools`` only: an upstream's call is
restored by looking its name up (``namespace`` + bare ``name``; a custom call as
``custom_tool_call`` with ``input`` unwrapped), and the client's replayed history is flattened
with the same map. A name is never split on a separator: ``get__weather`` is a plain function.
Hosted tools (web search, file search …) and tool search are dropped and marked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.edge.doors.responses.protocol import HOSTED_TOOLS
from gateway.errors import BadRequest

MAX_NAME = 64
CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's raw input text."}},
    "required": ["input"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Origin:
    """What a chat function name stands for in the client's request."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass(slots=True)
class Tools:
    """The chat functions of one request, and the map back to the client's tools."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    origins: dict[str, Origin] = field(default_factory=dict)  # chat name -> client's tool
    flat: dict[tuple[str | None, str], str] = field(default_factory=dict)  # (ns, name) -> chat

    def chat_name(self, name: str, namespace: str | None = None) -> str:
        """The chat name of a client's (namespace, name), as offered; a call of a tool this
        request does not offer is flattened the same way, so the model sees one spelling."""
        return self.flat.get((namespace, name)) or _joined(namespace, name)

    def origin(self, chat_name: str) -> Origin:
        return self.origins.get(chat_name) or Origin(chat_name)

    def _add(self, origin: Origin, function: dict[str, Any]) -> None:
        name = _joined(origin.namespace, origin.name)
        if len(name) > MAX_NAME or name in self.origins:
            name = _hashed(name, len(self.origins))
        self.origins[name] = origin
        self.flat[(origin.namespace, origin.name)] = name
        self.functions.append({"type": "function", "function": {**function, "name": name}})


def _joined(namespace: str | None, name: str) -> str:
    if not namespace:
        return name
    return namespace + name if namespace.endswith("__") else f"{namespace}__{name}"


def _hashed(name: str, salt: int) -> str:
    digest = hashlib.blake2b(f"{name}\x00{salt}".encode(), digest_size=4).hexdigest()
    return f"{name[: MAX_NAME - 9]}_{digest}"


def _drop_name(kind: Any) -> str:
    known = kind in HOSTED_TOOLS or kind == "tool_search"
    return f"tools[type={kind}]" if known else "tools[type=*]"


def tools_of(tools: list[Any] | None) -> Tools:
    """The chat functions for a request's `tools`, and the map back."""
    out = Tools()
    for i, tool in enumerate(tools or ()):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise BadRequest(f"'{where}' must be an object.", param=where)
        kind = tool.get("type")
        if kind == "namespace":
            ns = _name(tool, where)
            for j, inner in enumerate(tool.get("tools") or ()):
                if not isinstance(inner, dict):
                    raise BadRequest(f"'{where}.tools[{j}]' must be an object.", param=where)
                _one(out, inner, f"{where}.tools[{j}]", ns)
        elif kind in ("function", "custom"):
            _one(out, tool, where, None)
        else:
            name = _drop_name(kind)
            if name not in out.dropped:
                out.dropped.append(name)
    return out


def _name(tool: dict[str, Any], where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"'{where}.name' is required.", param=f"{where}.name")
    return name


def _one(out: Tools, tool: dict[str, Any], where: str, namespace: str | None) -> None:
    name = _name(tool, where)
    kind = tool.get("type")
    if kind == "custom":
        described = tool.get("description") or f"The {name} tool."
        fmt = tool.get("format") or {}
        if fmt.get("type") == "grammar" and fmt.get("definition"):
            described += (
                "\n\nPass the tool's whole input as the string `input`; it must match this "
                f"{fmt.get('syntax') or ''} grammar:\n{fmt['definition']}"
            )
        function = {"description": described, "parameters": CUSTOM_PARAMETERS}
        out._add(Origin(name, namespace, custom=True), function)
    elif kind == "function":
        function = {
            k: tool[k] for k in ("description", "parameters", "strict") if tool.get(k) is not None
        }
        out._add(Origin(name, namespace), function)
    else:
        dropped = _drop_name(kind)
        if dropped not in out.dropped:
            out.dropped.append(dropped)


def tool_choice(choice: Any, tools: Tools) -> str | dict[str, Any] | None:
    """The chat `tool_choice`; None where there is nothing to choose from."""
    if not tools.functions:
        if isinstance(choice, dict) and choice.get("type") not in ("function", "custom"):
            _forced(choice)
        return None
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") in ("function", "custom")
        and choice.get("name")
    ):
        name = tools.chat_name(choice["name"], choice.get("namespace"))
        return {"type": "function", "function": {"name": name}}
    if isinstance(choice, dict) and choice.get("type") in (*HOSTED_TOOLS, "tool_search"):
        _forced(choice)
    raise BadRequest(
        f"'tool_choice' {choice!r} is not supported (auto, none, required or a "
        "named function or custom tool are).",
        param="tool_choice",
    )


def _forced(choice: dict[str, Any]) -> None:
    raise BadRequest(
        f"'tool_choice' forces the {choice.get('type')!r} tool, which this gateway does not run.",
        param="tool_choice",
    )


def history_call(item: dict[str, Any], tools: Tools) -> dict[str, Any]:
    """A replayed function_call / custom_tool_call item as a chat tool call."""
    name = tools.chat_name(item["name"], item.get("namespace"))
    if item.get("type") == "custom_tool_call":
        arguments = orjson.dumps({"input": item.get("input") or ""}).decode()
    else:
        arguments = item.get("arguments") or ""
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def restored(item: dict[str, Any], tools: Tools) -> dict[str, Any]:
    """A function_call item named by its chat name, as the client's tool: a namespaced call
    with `namespace` and the bare name, a custom tool's as `custom_tool_call` with its input."""
    origin = tools.origin(item["name"])
    if origin.custom:
        out = {
            "id": item["id"].replace("fc_", "ctc_", 1),
            "type": "custom_tool_call",
            "call_id": item["call_id"],
            "name": origin.name,
            "input": custom_input(item["arguments"]),
            "status": item.get("status", "completed"),
        }
    else:
        out = {**item, "name": origin.name}
    if origin.namespace:
        out["namespace"] = origin.namespace
    return out


def custom_input(arguments: str) -> str:
    """The raw input of a custom tool's call from its function arguments (`{"input": …}`); text
    that is not that object is taken as the input itself."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return parsed["input"]
    return arguments
