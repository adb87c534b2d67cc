"""Config of `[profiles.NAME]`: a model's vendor serving recipe (built-ins: gateway/profiles.toml).

Same rules as gateway/config/frozen.py (frozen, unknown keys are errors).
gateway/serving/profile.py applies a
profile to requests; deploy/ launches replicas from it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.config.frozen import Frozen


class Sampling(Frozen):
    """The vendor's recommended sampling values, filled in where the client set none."""

    # Each is the OpenAI / vLLM field of the same name; unset: the client's or the server's.
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0)


class Profile(Frozen):
    """A model's vendor serving recipe: used when launching replicas and on every request."""

    # Where the recipe comes from (vendor model card / docs).
    source: str = ""
    sampling: Sampling = Sampling()
    # Sent as the top-level `chat_template_kwargs` body field (e.g. enable_thinking).
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    # The chat template opens <think> in the prompt, so the model emits only the closing tag.
    think_in_prompt: bool = False
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    context_window: int | None = Field(None, ge=256)
    # The model's tokenizer (folder, .gguf file or package), for an API upstream of this profile.
    tokenizer: str | None = None
    vllm_args: list[str] = Field(default_factory=list)
    vllm_env: dict[str, str] = Field(default_factory=dict)
    # GPUs per replica: above 1 when the model does not fit one card (a TP group per replica).
    tensor_parallel: int = Field(1, ge=1)
    # What vLLM's --model gets when `plumbline deploy vllm` launches this profile.
    weights: str | None = None

    @property
    def thinking(self) -> bool | None:
        value = self.chat_template_kwargs.get("enable_thinking")
        return None if value is None else bool(value)
