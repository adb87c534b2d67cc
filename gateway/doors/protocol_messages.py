"""Wire model of the Anthropic Messages API request the gateway accepts — validation only.

Server-side features (MCP servers, containers, server tools) are refused by name; labels are
accepted and ignored; any other unknown field is refused, so nothing is silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.doors.wire import check_model
from gateway.errors import BadRequest
from gateway.protocol import _Open

IGNORED = frozenset({"metadata", "service_tier"})
# Gateway extensions: vLLM sampling fields passed to the upstream as they are.
EXTENSIONS = (
    "min_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "chat_template_kwargs",
)
REFUSED = {
    "mcp_servers": "MCP servers are not supported",
    "container": "code-execution containers are not supported",
    "context_management": "server-side context management is not supported",
}


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


class ToolResultBlock(_Open):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = (
        None
    )
    is_error: bool | None = None


class ThinkingBlock(_Open):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Open):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class Message(_Open):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(_Open):
    type: str | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_Open):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)


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


KNOWN = frozenset(MessagesRequest.model_fields) | IGNORED | frozenset(EXTENSIONS)


def check(body: Any) -> MessagesRequest:
    """Validate a Messages request; refuse by name what this door does not do."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    for name, reason in REFUSED.items():
        if body.get(name) is not None:
            raise BadRequest(f"{name}: {reason}.", param=name)
    unknown = sorted(set(body) - KNOWN - set(REFUSED))
    if unknown:
        raise BadRequest(f"{unknown[0]}: Extra inputs are not permitted.", param=unknown[0])
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
