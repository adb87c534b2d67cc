"""The supervisor watches its engines after start: one that dies while serving is restarted
after a backoff, one that keeps dying is marked down, and the gateway's ``/health`` says so.

The "engine" is a real child process: a small stdlib HTTP server that answers the health paths
and dies on its first generation request (as llama.cpp did with an illegal instruction), by a
signal or an exit status. A file counts its lives; lives past `serving_lives` exit at start-up.
The backoff's waits go through an injected sleep, which records them (and can hold the
restart back until the test lets it go).
"""

from __future__ import annotations

import queue
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from deploy.engine import LaunchSpec
from deploy.launch import LocalEngines, launch_local
from deploy.restart import RestartPolicy
from deploy.supervisor import Supervisor
from gateway.edge.app import create_app
from tests.harness import config_from, serving_app

ENGINE = textwrap.dedent(
    """
    import http.server, json, os, resource, signal, sys
    from pathlib import Path

    port, lives, serving_lives, death = sys.argv[1:]
    port, lives, serving_lives = int(port), Path(lives), int(serving_lives)
    life = int(lives.read_text()) + 1 if lives.exists() else 1
    lives.write_text(str(life))
    print(f"life {life}", flush=True)
    if life > serving_lives:
        sys.exit(7)  # a restart that fails at start-up

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path not in ("/health", "/v1/models"):
                self.send_error(404)
                return
            body = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]})
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def do_POST(self):  # the first generation request kills it
            if death.startswith("SIG"):
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                os.kill(os.getpid(), getattr(signal, death))
            os._exit(int(death))

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Engine).serve_forever()
    """
)


class Sleeps:
    """An injected sleep: records each wait; `hold` keeps the sleeper until `release`."""

    def __init__(self, hold: bool = False) -> None:
        self.waits: list[float] = []
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.entered = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.entered.set()
        assert self.gate.wait(60), "the test never released the restart"

    def release(self) -> None:
        self.gate.set()


class States:
    """Every change the supervisor announces, in order."""

    def __init__(self) -> None:
        self.changes: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

    def __call__(self, name: str, view: dict[str, Any]) -> None:
        self.changes.put((name, dict(view)))

    def until(self, state: str) -> list[dict[str, Any]]:
        """The views announced up to and including the first one in `state`."""
        seen = []
        while True:
            _, view = self.changes.get(timeout=60)
            seen.append(view)
            if view["state"] == state:
                return seen


def engine_argv(tmp_path: Path, serving_lives: int, death: str) -> Callable[[LaunchSpec], list]:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    lives = tmp_path / "lives"
    return lambda spec: [
        sys.executable,
        str(script),
        str(spec.port),
        str(lives),
        str(serving_lives),
        death,
    ]


def spec(port: int) -> LaunchSpec:
    return LaunchSpec(engine="llamacpp", model="unused", served_model_name="fake", port=port)


def kill_by_use(port: int) -> None:
    """Send the engine a generation request; it dies answering it."""
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=30)


@pytest.fixture
def supervised(tmp_path: Path, port: int) -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def make(serving_lives: int, death: str, sleep: Sleeps, **policy: Any) -> Supervisor:
        supervisor = Supervisor(
            [spec(port)],
            tmp_path / "run",
            timeout=60,
            grace=2,
            command=engine_argv(tmp_path, serving_lives, death),
            policy=RestartPolicy(**policy),
            sleep=sleep,
        )
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        supervisor.stop()


def test_an_engine_that_dies_while_serving_is_restarted_after_a_backoff(
    supervised: Callable[..., Supervisor], port: int, tmp_path: Path
) -> None:
    sleeps, states = Sleeps(), States()
    supervisor = supervised(serving_lives=2, death="SIGILL", sleep=sleeps)
    (first,) = supervisor.start()
    supervisor.subscribe(states)
    assert supervisor.snapshot() == {
        f"fake@{port}": {"state": "running", "restarts": 0, "last_exit": None}
    }
    kill_by_use(port)
    seen = states.until("running")
    assert [v["state"] for v in seen] == ["restarting", "running"]
    assert seen[0]["last_exit"] == "SIGILL"
    assert sleeps.waits == [1.0]  # the policy's base backoff, through the injected sleep
    assert supervisor.snapshot()[f"fake@{port}"] == {
        "state": "running",
        "restarts": 1,
        "last_exit": "SIGILL",
    }
    (second,) = supervisor.replicas
    assert second.process.pid != first.process.pid and second.process.poll() is None
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 200
    assert (tmp_path / "lives").read_text() == "2"


def test_an_engine_that_keeps_dying_is_marked_down_after_bounded_restarts(
    supervised: Callable[..., Supervisor], port: int
) -> None:
    """The first life dies on use; every restart exits at start-up (status 7): the waits double
    (1, 2, 4 s) and after three failed restarts it is down, and stays down."""
    sleeps, states = Sleeps(), States()
    supervisor = supervised(serving_lives=1, death="3", sleep=sleeps, max_restarts=3)
    supervisor.start()
    supervisor.subscribe(states)
    kill_by_use(port)
    seen = states.until("down")
    assert [v["state"] for v in seen] == ["restarting"] * 3 + ["down"]
    assert [v["last_exit"] for v in seen] == [3, 7, 7, 7]
    assert sleeps.waits == [1.0, 2.0, 4.0]
    assert supervisor.snapshot()[f"fake@{port}"] == {
        "state": "down",
        "restarts": 3,
        "last_exit": 7,
    }
    (last,) = supervisor.replicas
    assert last.process.poll() == 7


def test_stop_during_a_backoff_restarts_nothing(
    supervised: Callable[..., Supervisor], port: int, tmp_path: Path
) -> None:
    sleeps = Sleeps(hold=True)
    supervisor = supervised(serving_lives=5, death="1", sleep=sleeps)
    supervisor.start()
    kill_by_use(port)
    assert sleeps.entered.wait(60)
    stopper = threading.Thread(target=supervisor.stop)
    stopper.start()
    sleeps.release()
    stopper.join(60)
    assert not stopper.is_alive()
    assert supervisor.snapshot()[f"fake@{port}"]["state"] == "stopped"
    assert (tmp_path / "lives").read_text() == "1"  # no second life was started


def test_the_gateway_health_shows_the_engine_restarting_then_running(
    tmp_path: Path, port: int
) -> None:
    """Through `launch_local` and a real gateway: the engine dies on the gateway's request; the
    upstream is unhealthy while the supervisor holds the restart back, healthy after."""
    config = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [
                {
                    "name": "local",
                    "kind": "llamacpp",
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "model": "fake",
                    "launch": {"engine": "llamacpp", "source": "unused"},
                }
            ],
            "models": {"m": {"upstreams": ["local"]}},
        }
    )
    sleeps = Sleeps(hold=True)
    argv = engine_argv(tmp_path, serving_lives=2, death="SIGSEGV")
    with (
        launch_local(config, echo=lambda line: None, command=argv, sleep=sleeps) as engines,
        serving_app(create_app(config, record=False, processes=engines)) as root,
    ):
        url = f"{root}/v1"
        assert isinstance(engines, LocalEngines)
        health = httpx.get(f"{root}/health", timeout=10).json()
        assert health["upstreams"]["local"]["process"] == {
            "state": "running",
            "restarts": 0,
            "last_exit": None,
        }
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}]
            )
        assert sleeps.entered.wait(60)
        health = httpx.get(f"{root}/health", timeout=10).json()
        local = health["upstreams"]["local"]
        assert local["process"] == {"state": "restarting", "restarts": 0, "last_exit": "SIGSEGV"}
        assert local["healthy"] is False
        states = States()
        engines.subscribe(states)
        sleeps.release()
        assert states.until("running")[-1]["restarts"] == 1
        health = httpx.get(f"{root}/health", timeout=10).json()
        local = health["upstreams"]["local"]
        assert local["process"] == {"state": "running", "restarts": 1, "last_exit": "SIGSEGV"}
        assert local["healthy"] is True
