"""Tests for deploy.supervisor with real, cheap processes.

A stdlib ``http.server`` serving a folder that holds ``health`` and ``v1/models`` files stands
in for an engine's health endpoints; small ``python -c`` scripts play engines that die, hang
or ignore SIGTERM. The real engines are exercised in test_engines_slow.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.engine import LaunchSpec, health_paths
from deploy.supervisor import (
    EngineStartError,
    Replica,
    Supervisor,
    backend_lines,
    log_tail,
    spawn,
    stop,
    wait_healthy,
)


def fake_spec(port: int, engine: str = "vllm") -> LaunchSpec:
    return LaunchSpec(engine=engine, model="unused", served_model_name="fake", port=port)  # type: ignore[arg-type]


def run(spec: LaunchSpec, argv: list[str], log: Path) -> Replica:
    return Replica(spec=spec, process=spawn(argv, os.environ, log), log_path=log)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder that answers GET /health and GET /v1/models when served."""
    root = tmp_path / "site"
    (root / "v1").mkdir(parents=True)
    (root / "v1" / "models").write_text('{"data": []}')
    (root / "health").write_text("")
    return root


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        stop(replica, grace=1.0)


def http_server(site: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(site)]


def test_wait_healthy_returns_once_the_health_paths_answer(
    site: Path, tmp_path: Path, replicas: list[Replica], port: int
) -> None:
    replicas.append(run(fake_spec(port), http_server(site, port), tmp_path / "a.log"))
    assert wait_healthy(replicas[0], timeout=30, interval=0.1) >= 0
    root = replicas[0].base_url.removesuffix("/v1")  # it returned: each path answers now
    for path in health_paths(replicas[0].spec):
        assert httpx.get(root + path, timeout=5).status_code == 200


def test_wait_healthy_needs_every_path(
    site: Path, tmp_path: Path, replicas: list[Replica], port: int
) -> None:
    (site / "health").unlink()  # vLLM's first probe now 404s; /v1/models alone is not enough
    replicas.append(run(fake_spec(port), http_server(site, port), tmp_path / "b.log"))
    with pytest.raises(EngineStartError, match="not healthy after"):
        wait_healthy(replicas[0], timeout=1.5, interval=0.1)


def test_a_dying_engine_raises_with_its_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('Using FAKE backend'); print('boom: no such model'); sys.exit(3)"
    log = tmp_path / "dead.log"
    replica = run(fake_spec(0), [sys.executable, "-c", script], log)
    with pytest.raises(EngineStartError, match="exited with status 3") as caught:
        wait_healthy(replica, timeout=30, interval=0.1)
    assert "boom: no such model" in caught.value.log_tail
    assert caught.value.log_path == log
    assert backend_lines(log) == ["Using FAKE backend"]


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    log = tmp_path / "stubborn.log"
    replica = run(fake_spec(0), [sys.executable, "-c", script], log)
    child = int(first_line(replica))
    assert _alive(child)
    assert stop(replica, grace=0.5) == -signal.SIGKILL
    assert not _alive(child)


def test_stop_is_gentle_first(tmp_path: Path) -> None:
    replica = run(
        fake_spec(0),
        [sys.executable, "-c", "import time; time.sleep(60)"],
        tmp_path / "gentle.log",
    )
    assert stop(replica, grace=10) == -signal.SIGTERM


def test_supervisor_stops_everything_when_one_replica_fails(
    site: Path, tmp_path: Path, port: int
) -> None:
    """A healthy fake and a dying one through Supervisor: the healthy one must be stopped too."""
    good_port = port
    argv = {
        good_port: http_server(site, good_port),
        0: [sys.executable, "-c", "raise SystemExit('bad flags')"],
    }
    specs = [fake_spec(good_port), fake_spec(0)]
    supervisor = Supervisor(specs, tmp_path / "run", timeout=30, command=lambda s: argv[s.port])
    with pytest.raises(EngineStartError, match="bad flags"):
        supervisor.start()
    assert supervisor.replicas == []
    assert "bad flags" in log_tail(tmp_path / "run" / "fake-0.log")


def test_supervisor_as_context_managers(site: Path, tmp_path: Path, port: int) -> None:
    supervisor = Supervisor(
        [fake_spec(port, "llamacpp")], tmp_path / "run", command=lambda s: http_server(site, port)
    )
    with supervisor as running:
        (replica,) = running
        assert replica.process.poll() is None
        assert replica.base_url == f"http://127.0.0.1:{port}/v1"
    assert replica.process.poll() is not None
    assert supervisor.replicas == []


async def test_supervisor_from_asyncio(site: Path, tmp_path: Path, port: int) -> None:
    supervisor = Supervisor(
        [fake_spec(port)], tmp_path / "run", command=lambda s: http_server(site, port)
    )
    async with supervisor as running:
        (replica,) = running
        assert replica.process.poll() is None
    assert replica.process.poll() is not None


def first_line(replica: Replica) -> str:
    """The first line the replica logs, waiting for it while the process lives."""
    while not (text := replica.log_path.read_text()).strip():
        try:
            replica.process.wait(0.05)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"process exited before logging: {text!r}")
    return text.splitlines()[0]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_cancelling_an_async_start_stops_the_engines(tmp_path: Path, port: int) -> None:
    never_healthy = [sys.executable, "-c", "import time; time.sleep(60)"]
    supervisor = Supervisor(
        [fake_spec(port)], tmp_path / "run", timeout=3600, command=lambda s: never_healthy
    )

    async def serve() -> None:
        async with supervisor:
            raise AssertionError("a replica that never answers cannot become healthy")

    task = asyncio.create_task(serve())
    while not supervisor.replicas:
        await asyncio.sleep(0.05)
    process = supervisor.replicas[0].process
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)  # a hang guard: without the cancel it waits an hour
    assert process.poll() is not None
    assert supervisor.replicas == []


def test_an_engine_dies_with_a_gateway_killed_outright(tmp_path: Path) -> None:
    """SIGKILL gives the gateway no chance to stop its engines: the tether makes the kernel
    send them SIGTERM instead, so nothing is left holding the GPU and the port."""
    import psutil  # type: ignore[import-untyped]

    parent_code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from deploy.supervisor import spawn
        child = spawn([sys.executable, "-c", "import time; time.sleep(300)"], os.environ,
                      Path({str(tmp_path / "engine.log")!r}))
        print(child.pid, flush=True)
        time.sleep(300)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    engine = psutil.Process(int(parent.stdout.readline()))

    def alive() -> bool:
        try:
            return engine.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    assert alive()
    parent.kill()
    parent.wait()
    try:
        engine.wait(timeout=10)
    except psutil.TimeoutExpired:
        pass
    finally:
        if alive():
            engine.kill()
            raise AssertionError("the engine outlived its killed parent")
