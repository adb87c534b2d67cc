"""Tests for deploy.engine: the command lines and environments of local engines."""

from __future__ import annotations

import pytest

from deploy.engine import (
    LLAMACPP_MODULE,
    VLLM_DEFAULT_KV_CACHE_BYTES,
    VLLM_MODULE,
    LaunchSpec,
    base_url,
    command,
    environment,
    health_paths,
)


def flag(argv: list[str], name: str) -> str:
    """The value following `name` in `argv`."""
    return argv[argv.index(name) + 1]


def vllm(**overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "engine": "vllm",
        "model": "/models/smol",
        "served_model_name": "smol",
        "port": 8101,
    }
    return LaunchSpec(**(fields | overrides))  # type: ignore[arg-type]


def llamacpp(**overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "engine": "llamacpp",
        "model": "/models/smol.gguf",
        "served_model_name": "smol-gguf",
        "port": 8102,
    }
    return LaunchSpec(**(fields | overrides))  # type: ignore[arg-type]


def test_vllm_runs_the_api_server_module_with_the_given_interpreter() -> None:
    argv = command(vllm(), python="/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", VLLM_MODULE]
    assert flag(argv, "--model") == "/models/smol"
    assert flag(argv, "--served-model-name") == "smol"
    assert flag(argv, "--host") == "127.0.0.1"
    assert flag(argv, "--port") == "8101"
    assert "--enforce-eager" in argv
    assert "--enable-prompt-tokens-details" in argv  # or vLLM reports no cached tokens
    assert flag(argv, "--kv-cache-memory-bytes") == str(VLLM_DEFAULT_KV_CACHE_BYTES)


def test_vllm_kv_cache_size_is_configurable_and_llamacpp_refuses_it() -> None:
    argv = command(vllm(kv_cache_bytes=512 << 20), python="py")
    assert flag(argv, "--kv-cache-memory-bytes") == str(512 << 20)
    with pytest.raises(ValueError, match="vLLM option"):
        llamacpp(kv_cache_bytes=1)


def test_vllm_optional_flags_appear_only_when_given() -> None:
    bare = command(vllm(), python="py")
    for absent in ("--max-model-len", "--reasoning-parser", "--tool-call-parser"):
        assert absent not in bare
    assert "--enable-auto-tool-choice" not in bare

    full = command(
        vllm(max_model_len=4096, reasoning_parser="qwen3", tool_call_parser="hermes"),
        python="py",
    )
    assert flag(full, "--max-model-len") == "4096"
    assert flag(full, "--reasoning-parser") == "qwen3"
    assert flag(full, "--tool-call-parser") == "hermes"
    assert "--enable-auto-tool-choice" in full


def test_extra_args_come_last_in_order() -> None:
    argv = command(vllm(extra_args=("--dtype", "bfloat16")), python="py")
    assert argv[-2:] == ["--dtype", "bfloat16"]
    argv = command(llamacpp(extra_args=("--verbose", "false")), python="py", cores=2)
    assert argv[-2:] == ["--verbose", "false"]


def test_llamacpp_uses_every_core_and_never_interrupts_streams() -> None:
    argv = command(llamacpp(max_model_len=2048), python="py", cores=6)
    assert argv[:3] == ["py", "-m", LLAMACPP_MODULE]
    assert flag(argv, "--model") == "/models/smol.gguf"
    assert flag(argv, "--model_alias") == "smol-gguf"
    assert flag(argv, "--n_threads") == "6"
    assert flag(argv, "--n_threads_batch") == "6"
    assert flag(argv, "--interrupt_requests") == "false"
    assert flag(argv, "--n_ctx") == "2048"


def test_llamacpp_explicit_threads_win_over_core_count() -> None:
    assert flag(command(llamacpp(threads=3), python="py", cores=8), "--n_threads") == "3"


def test_llamacpp_defaults_to_this_machines_cores() -> None:
    assert int(flag(command(llamacpp(), python="py"), "--n_threads")) >= 1


def test_llamacpp_rejects_vllm_parsers() -> None:
    with pytest.raises(ValueError, match="vLLM options"):
        llamacpp(reasoning_parser="qwen3")


def test_unknown_engine_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        LaunchSpec(engine="sglang", model="m", served_model_name="m")  # type: ignore[arg-type]


def test_environment_is_base_with_extra_env_over_it() -> None:
    spec = vllm(extra_env={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "PATH": "/opt/bin"})
    assert environment(spec, {"PATH": "/bin", "HOME": "/h"}) == {
        "PATH": "/opt/bin",
        "HOME": "/h",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }


def test_llamacpp_environment_is_base_plus_extra() -> None:
    assert environment(llamacpp(extra_env={"A": "1"}), {"B": "2"}) == {"A": "1", "B": "2"}


def test_base_url_and_health_paths() -> None:
    assert base_url(vllm()) == "http://127.0.0.1:8101/v1"
    assert base_url(vllm(host="::1")) == "http://[::1]:8101/v1"
    assert health_paths(vllm()) == ("/health", "/v1/models")
    assert health_paths(llamacpp()) == ("/v1/models",)
