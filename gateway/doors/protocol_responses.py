"""Wire model of the OpenAI Responses API request the gateway accepts — validation only.

The door is stateless: it translates one request into chat completions and back. Fields that
need stored state or server-side tools are refused by name; fields that only label a request
are accepted and ignored; any other field is refused, so nothing is silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gateway.doors.wire import check_model
from gateway.errors import BadRequest
from gateway.protocol import Probability, Temperature, _Open

# Labels and hints with no effect on what a stateless translation generates.
IGNORED = frozenset(
    {
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
        "truncation",
        "store",
        "background",
        "stream_options",
    }
)
# Gateway extensions: vLLM sampling fields passed to the upstream as they are.
EXTENSIONS = (
    "top_k",
    "min_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "chat_template_kwargs",
)
REFUSED = {
    "previous_response_id": "this gateway does not store responses; send the whole conversation",
    "conversation": "this gateway does not store conversations; send the whole conversation",
    "prompt": "stored prompt templates are not supported",
    "max_tool_calls": "limiting built-in tool calls is not supported",
    "context_management": "server-side context management is not supported",
    "background_options": "background responses are not supported",
}
INCLUDABLE = frozenset({"reasoning.encrypted_content", "message.output_text.logprobs"})


class TextPart(_Open):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class RefusalPart(_Open):
    type: Literal["refusal"]
    refusal: str


class ImagePart(_Open):
    type: Literal["input_image"]
    image_url: str | None = None
    detail: str | None = None


class OtherPart(_Open):
    type: Literal["input_file", "input_audio"]


Part = Annotated[TextPart | RefusalPart | ImagePart | OtherPart, Field(discriminator="type")]


class MessageItem(_Open):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]


class FunctionCallItem(_Open):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionOutputItem(_Open):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]


class ReasoningItem(_Open):
    type: Literal["reasoning"]
    summary: list[TextPart] = []
    content: list[TextPart] | None = None


class ReferenceItem(_Open):
    type: Literal["item_reference"]


def _kind(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("type") or ("message" if "role" in item else None)
    return getattr(item, "type", None)


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[ReferenceItem, Tag("item_reference")],
    Discriminator(_kind),
]


class FunctionTool(_Open):
    type: str
    name: str | None = None
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class Reasoning(_Open):
    effort: str | None = None
    summary: str | None = None


class TextConfig(_Open):
    format: dict[str, Any] | None = None
    verbosity: str | None = None


class ResponsesRequest(_Open):
    model: str = Field(min_length=1, max_length=256)
    input: str | list[Item]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: Temperature | None = None
    top_p: Probability | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    text: TextConfig | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    truncation: str | None = None
    metadata: dict[str, Any] | None = None


KNOWN = frozenset(ResponsesRequest.model_fields) | IGNORED | frozenset(EXTENSIONS)


def check(body: Any) -> ResponsesRequest:
    """Validate a Responses request; refuse by name what this door does not do."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    for name, reason in REFUSED.items():
        if body.get(name) is not None:
            raise BadRequest(f"'{name}' is not supported: {reason}.", param=name)
    unknown = sorted(set(body) - KNOWN - set(REFUSED))
    if unknown:
        raise BadRequest(
            f"'{unknown[0]}' is not a Responses API field this gateway supports.", param=unknown[0]
        )
    request = check_model(ResponsesRequest, body)
    if request.store:
        raise BadRequest(
            "'store': true is not supported: this gateway does not store responses; send "
            "store=false (or omit it) and the whole conversation in 'input'.",
            param="store",
        )
    if request.background:
        raise BadRequest("'background': true is not supported.", param="background")
    if request.truncation not in (None, "disabled"):
        raise BadRequest("Only 'truncation': 'disabled' is supported.", param="truncation")
    for item in request.include or ():
        if item not in INCLUDABLE:
            raise BadRequest(f"'include' value {item!r} is not supported.", param="include")
    if isinstance(body["input"], list) and not body["input"] and not request.instructions:
        raise BadRequest("'input' is empty.", param="input")
    return request
