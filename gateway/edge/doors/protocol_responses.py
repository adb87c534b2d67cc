"""Wire model of the OpenAI Responses API request the gateway accepts, and its field policy.

The door translates one request into chat completions and back; the state it keeps (`store`,
`previous_response_id`, `item_reference`) is on the gateway's own store (`response_state`).
`POLICY` is the door's field table (doors/policy.py; the README's Responses-door section is
rendered from it): every field is honoured, translated, inert or dropped-and-marked. A field,
item type, content part or tool type the table does not name is inert (or dropped and marked
where the model would otherwise miss content): harnesses add them with every release, and Codex
does not retry a 400. The door refuses (400) only what it cannot serve without silently changing
the request's meaning: state it does not keep (`conversation`, `background: true`, stored
`prompt`s) and a `tool_choice` forcing a tool it does not run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gateway.edge.doors.policy import Action, Rule, table
from gateway.edge.doors.wire import check_model
from gateway.edge.protocol import Probability, Temperature, _Open
from gateway.errors import BadRequest

H, T, N, D = Action.HONOUR, Action.TRANSLATE, Action.INERT, Action.DROP
HOSTED_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "mcp",
    "local_shell",
    "shell",
)
POLICY = table(
    Rule("model", H, "the route (or an alias); answers name it, not the upstream's id"),
    Rule("input", T, "a string, or the items below, as chat messages"),
    Rule("instructions", T, "the leading system message"),
    Rule("stream", H, "the typed events; `response.in_progress` as a heartbeat in silences"),
    Rule("stream_options", N, ""),
    Rule("max_output_tokens", T, "`max_tokens`; a cut answer still ends `response.completed`"),
    Rule("temperature", T, ""),
    Rule("top_p", T, ""),
    Rule("top_logprobs", T, "`logprobs` + `top_logprobs`"),
    Rule("parallel_tool_calls", T, ""),
    Rule("tools", T, "by type, below; an empty list is not forwarded"),
    Rule("tool_choice", T, "not forwarded without tools; forcing a hosted tool is a 400"),
    Rule("reasoning.effort", T, "`reasoning_effort`; `none` turns thinking off"),
    Rule("reasoning.summary", N, "reasoning comes back as `reasoning_text`, not summarised"),
    Rule("reasoning.generate_summary", N, ""),
    Rule("text.format", T, "`response_format` (text, json_object, json_schema)"),
    Rule("text.verbosity", D, "chat completions has no verbosity control"),
    Rule(
        "include[reasoning.encrypted_content]", H, "reasoning items carry `encrypted_content: null`"
    ),
    Rule("include[message.output_text.logprobs]", T, "`logprobs`"),
    Rule("include[*]", N, "other values name output of tools the gateway does not run"),
    Rule("prompt_cache_key", H, "session affinity when no session header is sent"),
    Rule("client_metadata", N, "Codex's telemetry labels"),
    Rule("metadata", N, "echoed on the response"),
    Rule("user", N, ""),
    Rule("safety_identifier", N, ""),
    Rule("prompt_cache_retention", N, ""),
    Rule("service_tier", N, ""),
    Rule("truncation", N, "`disabled` always: an overflow is `context_length_exceeded`"),
    Rule("max_tool_calls", N, "limits hosted tools, which never run here"),
    Rule("background_options", N, ""),
    Rule("context_management", D, "no server-side compaction; the client compacts"),
    Rule("store", H, "default `true`: the response is kept on the gateway's store"),
    Rule("background", H, "`false`; `true` is a 400"),
    Rule("previous_response_id", H, "its stored input and output go before `input`"),
    Rule("conversation", H, "a 400: nothing is stored; send the whole conversation"),
    Rule("prompt", H, "a 400: stored prompt templates are not kept"),
    Rule("top_k, min_p, seed, …", T, "vLLM sampling extensions, passed through"),
    Rule("*", N, "any other top-level field"),
    Rule("input[type=message]", T, "`developer` and `system` turns merge into one leading system"),
    Rule("input[type=function_call]", T, "assistant `tool_calls`; namespaced names re-flattened"),
    Rule("input[type=function_call_output]", T, "a `tool` message (text parts joined)"),
    Rule("input[type=custom_tool_call]", T, 'an assistant tool call with `{"input": …}`'),
    Rule("input[type=custom_tool_call_output]", T, "a `tool` message"),
    Rule("input[type=reasoning]", T, "`reasoning_content` of the next assistant turn"),
    Rule("input[type=item_reference]", H, "the stored item of that id (output or input)"),
    Rule("input[type=tool_search_call]", D, "tool search is not offered (see tools)"),
    Rule("input[type=tool_search_output]", D, ""),
    Rule("input[type=*]", D, "other items (hosted-tool calls, compaction, …)"),
    Rule("content[type=input_text]", T, "also output_text, text, refusal, summary/reasoning text"),
    Rule(
        "content[type=input_image]",
        T,
        "image parts of a user turn; from a tool output, of the next user turn",
    ),
    Rule("content[type=input_image] outside a user turn", D, ""),
    Rule("content[type=input_file]", D, "files are not read"),
    Rule("content[type=*]", D, "other parts (audio, …)"),
    Rule("tools[type=function]", T, "a chat function"),
    Rule(
        "tools[type=namespace]",
        T,
        "each function as `<ns>__<name>`; calls come back with `namespace`",
    ),
    Rule(
        "tools[type=custom]",
        T,
        "a function of one string `input`; calls come back as `custom_tool_call`",
    ),
    Rule("tools[type=tool_search]", D, "every tool is offered up front instead"),
    *(
        Rule(f"tools[type={kind}]", D, "a hosted tool the gateway does not run")
        for kind in HOSTED_TOOLS
    ),
    Rule("tools[type=*]", D, "any other tool type"),
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
    "conversation": "this gateway does not store conversations; send the whole conversation",
    "prompt": "stored prompt templates are not supported",
}
ENCRYPTED = "reasoning.encrypted_content"


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
    type: Any = None


def _tag(tags: dict[str, str], default: str) -> Any:
    """A discriminator: the tag of a value's `type` (a message item may omit it), or `default`
    for a type the door does not model, so an unknown one is never a validation error."""

    def kind(value: Any) -> str:
        got = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        if got is None and isinstance(value, dict) and "role" in value:
            got = "message"
        return tags.get(got, default) if isinstance(got, str) else default

    return kind


_TEXT = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
Part = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[RefusalPart, Tag("refusal")]
    | Annotated[ImagePart, Tag("input_image")]
    | Annotated[OtherPart, Tag("other")],
    Discriminator(
        _tag(
            {t: "text" for t in _TEXT} | {"refusal": "refusal", "input_image": "input_image"},
            "other",
        )
    ),
]


class MessageItem(_Open):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]


class FunctionCallItem(_Open):
    type: Literal["function_call"]
    call_id: str
    name: str
    namespace: str | None = None
    arguments: str


class FunctionOutputItem(_Open):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]


class CustomCallItem(_Open):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    namespace: str | None = None
    input: str


class CustomOutputItem(_Open):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[Part]


class ReasoningItem(_Open):
    type: Literal["reasoning"]
    summary: list[TextPart] = []
    content: list[TextPart] | None = None


class OtherItem(_Open):
    type: Any = None


_ITEMS = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
)
Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionOutputItem, Tag("function_call_output")]
    | Annotated[CustomCallItem, Tag("custom_tool_call")]
    | Annotated[CustomOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_tag({k: k for k in _ITEMS}, "other")),
]


class Tool(_Open):
    type: str
    name: str | None = None
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None
    tools: list[dict[str, Any]] | None = None  # a namespace's functions


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
    tools: list[Tool] | None = None
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
    previous_response_id: str | None = Field(None, max_length=128)
    background: bool | None = None
    truncation: str | None = None
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    client_metadata: dict[str, Any] | None = None


def check(body: Any) -> ResponsesRequest:
    """Validate a Responses request; refuse by name only what the door cannot serve."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    for name, reason in REFUSED.items():
        if body.get(name) is not None:
            raise BadRequest(f"'{name}' is not supported: {reason}.", param=name)
    request = check_model(ResponsesRequest, body)
    if request.background:
        raise BadRequest("'background': true is not supported.", param="background")
    if isinstance(body["input"], list) and not body["input"] and not request.instructions:
        raise BadRequest("'input' is empty.", param="input")
    return request
