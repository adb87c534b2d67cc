"""deploy.launch's gateway recipe: the uvicorn command line the benchmarks start the gateway
with serves like `plumbline serve` does; and the one vLLM argv builder behind CPU and GPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from deploy.engine import LaunchSpec, vllm_args
from deploy.launch import (
    SERVE_OPTIONS,
    gateway_command,
    metrics_folder,
    spec_for,
    workers_problems,
)
from deploy.vllm import gpu_args
from gateway.config import parse_config
from plumbline_kit.fakes.upstream import running_fake
from tests.harness import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def write_config(folder: Path, upstream: str) -> Path:
    """A gateway config with one model, `smol`, served by the fake upstream at `upstream`."""
    config = folder / "plumbline.toml"
    config.write_text(
        "[server]\nhealth_interval_s = 0\n\n[store]\nenabled = false\n\n"
        f'[[upstreams]]\nname = "a"\nkind = "vllm"\nbase_url = "{upstream}"\n'
        'model = "fake-model"\n\n[models.smol]\nupstreams = ["a"]\n'
    )
    return config


def test_gateway_command_serves_a_chat_through_uvicorn(tmp_path: Path) -> None:
    argv = gateway_command(port := free_port())
    assert "--no-access-log" in argv and "--no-proxy-headers" in argv
    assert argv[argv.index("--timeout-graceful-shutdown") + 1] == "30"
    with running_fake() as fake:
        config = write_config(tmp_path, fake.base_url)
        env = {**os.environ, "PLUMBLINE_CONFIG": str(config)}
        log = (tmp_path / "gateway.log").open("wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(
                lambda: proc.poll() is not None or _healthy(f"http://127.0.0.1:{port}/health"), 60
            )
            assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
            resp = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": "smol", "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
            assert resp.json()["choices"][0]["message"]["content"]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
    assert SERVE_OPTIONS["proxy_headers"] is False


def test_gpu_args_are_the_cpu_recipe_without_eager_mode_and_kv_cache() -> None:
    spec = LaunchSpec(
        engine="vllm",
        model="/models/smol",
        served_model_name="smol",
        port=8101,
        max_model_len=4096,
        reasoning_parser="qwen3",
        extra_args=("--seed", "1"),
    )
    cpu, gpu = vllm_args(spec), gpu_args(spec)
    kv = cpu.index("--kv-cache-memory-bytes")
    assert [a for i, a in enumerate(cpu) if a != "--enforce-eager" and i not in (kv, kv + 1)] == gpu
    assert "--enable-prompt-tokens-details" in gpu and gpu[-2:] == ["--seed", "1"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_plumbline_serve_stops_quietly_on_ctrl_c_and_sigterm(tmp_path: Path, sig: int) -> None:
    """Ctrl-C (SIGINT) or SIGTERM ends `plumbline serve` with status 0 and no traceback: uvicorn
    raised the signal again after its shutdown, which cancelled the lifespan task under asyncio's
    runner and printed two tracebacks at a user who had only pressed Ctrl-C."""
    port = free_port()
    with running_fake() as fake:
        config = write_config(tmp_path, fake.base_url)
        plumbline = Path(sys.executable).parent / "plumbline"
        argv = [str(plumbline), "serve", "--config", str(config), "--port", str(port)]
        proc = subprocess.Popen(
            argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(
                lambda: proc.poll() is not None or _healthy(f"http://127.0.0.1:{port}/health"), 60
            )
            assert proc.poll() is None
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = out.decode()
    assert proc.returncode == 0, said
    assert "Traceback" not in said and "ERROR" not in said, said


def test_metrics_folder_is_private_and_removed_unless_the_user_gave_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # TMPDIR is read again
    try:
        with metrics_folder() as folder:
            assert folder.parent == tmp_path and folder.is_dir()
            (folder / "counter_1.db").write_bytes(b"")
        assert not folder.exists()
    finally:
        tempfile.tempdir = None
    given = tmp_path / "mine"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(given))
    with metrics_folder() as folder:
        assert folder == given and folder.is_dir()
    assert given.is_dir()


def test_workers_need_a_shared_store_only_for_what_would_be_counted_per_worker() -> None:
    """Plain relaying splits nothing; a budget, a shadow or scheduled evals would be counted by
    each worker on its own without a store every worker shares."""
    base: dict[str, object] = {
        "upstreams": [
            {"name": "a", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
        ],
        "models": {"smol": {"upstreams": ["a"]}},
    }
    off = {"store": {"enabled": False}}
    assert workers_problems(parse_config({**base, **off})) == []
    assert workers_problems(parse_config({**base, "evals": {"every_hours": 6}})) == []
    (why,) = workers_problems(parse_config({**base, **off, "evals": {"every_hours": 6}}))
    assert why == "the scheduled eval rounds would be kept per worker: [store] is off"
    memory = {"store": {"url": "sqlite://"}}
    (why,) = workers_problems(parse_config({**base, **memory}))
    assert why.startswith("the records would be kept per worker: [store] is in memory")


def test_a_llamacpp_replica_is_launched_with_its_profiles_template_variables() -> None:
    """llama-cpp-python takes chat-template variables only at launch: the profile's thinking
    switch and reasoning effort go on its command line (what gateway/serving/dialect.py counts
    on), and a profile without any adds nothing."""

    def launched(profile: str) -> tuple[str, ...]:
        cfg = parse_config(
            {
                "upstreams": [
                    {
                        "name": "cpp",
                        "kind": "llamacpp",
                        "base_url": "http://127.0.0.1:8402/v1",
                        "model": "m",
                        "profile": profile,
                        "launch": {"engine": "llamacpp", "args": ["--verbose", "false"]},
                    }
                ]
            }
        )
        return spec_for(cfg, cfg.upstreams[0], model="weights.gguf").extra_args

    assert launched("qwen3-instruct") == (
        "--chat_template_kwargs",
        '{"enable_thinking": false}',
        "--verbose",
        "false",
    )
    assert launched("gpt-oss")[:2] == ("--chat_template_kwargs", '{"reasoning_effort": "medium"}')
    assert launched("smollm2") == ("--verbose", "false")
