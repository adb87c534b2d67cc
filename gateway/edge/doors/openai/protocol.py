"""Wire models of the OpenAI requests the gateway accepts — validation only, no logic.

The models check what must be right for a request to make sense (types, ranges, required
fields) and allow every other field through untouched, so new upstream features pass without a
gateway release. Handlers validate the parsed dict and keep relaying the dict itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from gateway.errors import BadRequest, describe

Temperature = Annotated[float, Field(ge=0, le=2)]
Probability = Annotated[float, Field(ge=0, le=1)]
Penalty = Annotated[float, Field(ge=-2, le=2)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


class Sampled(_Open):
    model: str = Field(min_length=1, max_length=256)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=1)
    temperature: Temperature | None = None
    top_p: Probability | None = None
    top_k: int | None = Field(None, ge=-1)
    min_p: Probability | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: float | None = Field(None, gt=0, le=10)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool | int | None = None
    user: str | None = None
    # vLLM's cap on thinking tokens (-1: none); said in each upstream's dialect (`body_for`).
    thinking_token_budget: StrictInt | None = Field(None, ge=-1)


class ChatRequest(Sampled):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None


class CompletionRequest(Sampled):
    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=128)
    logprobs: int | None = Field(None, ge=0, le=20)


class EmbeddingRequest(_Open):
    model: str = Field(min_length=1, max_length=256)
    input: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], body: Any) -> M:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        message, param = describe(e.errors())
        raise BadRequest(message, param=param) from None
