"""Wire model of the Anthropic Messages API request the gateway accepts, and the door's field
policy (`POLICY`, rendered into the README's Messages-door section).

Validation checks the fields the door serves and the blocks it knows; anything else is open:
an unknown top-level field, content block or tool type is dropped and marked by the translation
(`messages.chat_request`), never refused, since Claude Code adds fields with every release. A
400 is left for requests that could only be served by silently changing their meaning.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gateway.edge.doors.openai.protocol import _Open
from gateway.edge.doors.policy import Action, Rule, table
from gateway.edge.doors.wire import check_model
from gateway.errors import BadRequest

H, T, N, D = Action.HONOUR, Action.TRANSLATE, Action.INERT, Action.DROP
POLICY = table(
    Rule("model", H, "the route; answers carry the name asked for"),
    Rule("messages", T, "chat messages; `role: system` turns merged into the leading system"),
    Rule("system", T, "one leading system message; the `x-anthropic-billing-header` block dropped"),
    Rule("max_tokens", T, "clamped to the upstream's window less the prompt (x-plumbline-clamped)"),
    Rule("stream", H, "SSE events as Anthropic sends them; `false` always gets JSON"),
    Rule("stop_sequences", T, "`stop`"),
    Rule("temperature", H),
    Rule("top_p", H),
    Rule("top_k", H),
    Rule("tools", T, "chat functions"),
    Rule("tools.defer_loading", T, "a deferred tool is sent once a `tool_reference` names it"),
    Rule("tools[type=server]", D, "server tools (`web_search_*`, `code_execution_*`, …)"),
    Rule("tool_choice", T, "`auto`, `required`, `none`, a named function"),
    Rule("thinking", T, "`enabled`/`disabled`: `enable_thinking`; `adaptive`: the profile's"),
    Rule("thinking.budget_tokens", T, "the upstream's thinking cap, where it takes one"),
    Rule("thinking.display", H, "`omitted`: no thinking text is sent back"),
    Rule("context_management", H, "edits applied by the gateway, reported in `applied_edits`"),
    Rule("context_management[clear_thinking_20251015]", H, "older turns' thinking dropped"),
    Rule("context_management[clear_tool_uses_20250919]", H, "oldest tool results replaced"),
    Rule("context_management[other]", D, "an edit the gateway does not know"),
    Rule("output_config.effort", T, "`reasoning_effort` (xhigh, max: high) where the route has it"),
    Rule("output_config.format", T, "`response_format` (a JSON schema)"),
    Rule("output_config.*", N, "other output settings (task budgets)"),
    Rule("metadata", N, "`user_id`'s session id keys session affinity; never forwarded"),
    Rule("service_tier", N),
    Rule("cache_control", N, "on any block or tool: the engine caches prefixes by itself"),
    Rule("content[type=text|image]", T, "chat text and `image_url` parts"),
    Rule("content[type=tool_use]", T, "assistant `tool_calls`; ids mapped to and from `toolu_…`"),
    Rule("content[type=tool_result]", T, "a `tool` message; `is_error`: `Error: `; images after"),
    Rule("content[type=tool_reference]", T, "text: the tool is now available, with its schema"),
    Rule("content[type=thinking]", T, "`reasoning_content` of the assistant turn"),
    Rule("content[type=redacted_thinking]", N, "opaque to any engine but its issuer"),
    Rule("content[type=other]", D, "a block the gateway cannot show the model (`document`, …)"),
    Rule("thread", H, "kept on the gateway's store; `continue` puts the conversation back"),
    Rule("mcp_servers", D, "the gateway connects to no MCP server"),
    Rule("container", D, "no code-execution containers"),
    Rule("anthropic-beta", N, "any value; never refused"),
    Rule("<other field>", D, "a field this table does not name (x-plumbline-dropped)"),
)

# Labels the door takes and does nothing with.
INERT = frozenset({"metadata", "service_tier", "context_management", "output_config"})
# Gateway extensions: vLLM sampling fields passed to the upstream as they are.
EXTENSIONS = (
    "min_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "chat_template_kwargs",
)
# Server-side features the gateway cannot serve: dropped and marked.
DROPPED = ("mcp_servers", "container")


class TextBlock(_Open):
    type: Literal["text"]
    text: str


class Base64Source(_Open):
    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(_Open):
    type: Literal["url"]
    url: str


class ImageBlock(_Open):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]


class ToolUseBlock(_Open):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolReferenceBlock(_Open):
    type: Literal["tool_reference"]
    tool_name: str


KNOWN_BLOCKS = frozenset(
    {"text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"}
)


def _tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) and kind in KNOWN_BLOCKS else "other"


# Any other block is open: dropped and marked by the translation, never refused.
Other = Annotated[dict[str, Any], Tag("other")]
InnerBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolReferenceBlock, Tag("tool_reference")]
    | Other,
    Discriminator(_tag),
]


class ToolResultBlock(_Open):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[InnerBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Open):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Open):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ToolReferenceBlock, Tag("tool_reference")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Other,
    Discriminator(_tag),
]


class Message(_Open):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class Tool(_Open):
    type: str | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    defer_loading: bool | None = None


class ToolChoice(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_Open):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)
    display: str | None = None


class OutputConfig(_Open):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None


class MessagesRequest(_Open):
    model: str = Field(min_length=1, max_length=256)
    max_tokens: int = Field(ge=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    stream: bool = False
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    context_management: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


KNOWN = frozenset(MessagesRequest.model_fields) | INERT | frozenset(EXTENSIONS) | set(DROPPED)


def check(body: Any) -> MessagesRequest:
    """Validate a Messages request: what the door serves must be well formed; the rest is open."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    request = check_model(MessagesRequest, body)
    thinking = request.thinking
    if (
        thinking
        and thinking.budget_tokens is not None
        and thinking.budget_tokens >= request.max_tokens
    ):
        raise BadRequest(
            "`max_tokens` must be greater than `thinking.budget_tokens`.",
            param="thinking.budget_tokens",
        )
    return request
