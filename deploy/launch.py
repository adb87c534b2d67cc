"""From the config to running local replicas: what `plumbline up` starts.

Each `[[upstreams]]` entry with a `launch` table becomes a `LaunchSpec`: the engine, the weights
(a Hugging Face folder converted once from the GGUF for vLLM, the GGUF itself for llama.cpp), the
host and port taken from the upstream's `base_url`, and the profile's parsers, flags and
environment — the same recipe the gateway applies on every request.

`launch_local` yields `LocalEngines`: the replicas, and the gateway's narrow read of their
supervisor (each engine's state, restarts and last exit status, by upstream name).

`SERVE_OPTIONS` is how the gateway's own HTTP server runs, as `plumbline serve` passes it to
`uvicorn.run` and as `gateway_command` spells it on a uvicorn command line (several workers, or
a process of its own: the benchmarks).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from deploy.engine import LaunchSpec
from deploy.localmodel import ensure_hf_model, gguf_path
from deploy.supervisor import Replica, Supervisor, backend_lines, replica_name
from gateway.config import Config, Upstream

SERVE_OPTIONS: dict[str, Any] = {
    "loop": "uvloop",
    "http": "httptools",
    "log_level": "warning",
    "access_log": False,
    # Nothing here reads the client's address or scheme, which is all this would rewrite.
    "proxy_headers": False,
    "timeout_graceful_shutdown": 30,
}


class _Server(uvicorn.Server):
    """uvicorn's server, that ends on SIGINT or SIGTERM once shut down gracefully, with status 0.

    uvicorn raises a caught signal again after its shutdown (so a parent sees it); under
    asyncio's runner that turned Ctrl-C on `plumbline up` into a cancelled lifespan task and two
    tracebacks, and SIGTERM on `plumbline serve` into exit status -15 after a clean shutdown.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        getattr(self, "_captured_signals", []).clear()


def serve(app: Any, host: str, port: int) -> None:
    """Serve `app` as `plumbline serve` and `plumbline up` do (`SERVE_OPTIONS`)."""
    _Server(uvicorn.Config(app, host=host, port=port, **SERVE_OPTIONS)).run()


def gateway_command(
    port: int, *, host: str = "127.0.0.1", workers: int = 1, python: str = sys.executable
) -> list[str]:
    """The argv of `uvicorn --factory gateway.edge.app:app_from_env` with `SERVE_OPTIONS` (the
    config path comes from the PLUMBLINE_CONFIG variable)."""
    argv = [python, "-m", "uvicorn", "--factory", "gateway.edge.app:app_from_env"]
    argv += ["--host", host, "--port", str(port)]
    if workers > 1:
        argv += ["--workers", str(workers)]
    for name, value in SERVE_OPTIONS.items():
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def _weights(upstream: Upstream) -> str:
    assert upstream.launch is not None
    source = upstream.launch.source
    local = Path(source).expanduser()
    if local.exists():
        return str(local)
    if upstream.launch.engine == "llamacpp":
        return str(gguf_path(source))
    return str(ensure_hf_model(source))


def spec_for(config: Config, upstream: Upstream, model: str | None = None) -> LaunchSpec:
    """The launch spec of one upstream. `model` overrides the weights path (tests, dry runs)."""
    launch = upstream.launch
    if launch is None:
        raise ValueError(f"upstream {upstream.name!r} has no [launch] table")
    url = urlsplit(upstream.base_url)
    if url.hostname is None or url.port is None:
        raise ValueError(f"upstream {upstream.name!r}: base_url needs an explicit host and port")
    profile = config.profiles.get(upstream.profile) if upstream.profile else None
    vllm = launch.engine == "vllm"
    extra_args = list(launch.args)
    extra_env = dict(launch.env)
    if vllm and profile is not None:
        extra_args = [*profile.vllm_args, *extra_args]
        extra_env = {**profile.vllm_env, **extra_env}
    return LaunchSpec(
        engine=launch.engine,
        model=model or _weights(upstream),
        served_model_name=upstream.model,
        host=url.hostname,
        port=url.port,
        reasoning_parser=profile.reasoning_parser if vllm and profile else None,
        tool_call_parser=profile.tool_call_parser if vllm and profile else None,
        max_model_len=launch.max_model_len,
        threads=launch.threads,
        extra_args=tuple(extra_args),
        extra_env=extra_env,
    )


class LocalEngines:
    """The supervisor's engine states by upstream name: what
    `gateway.serving.processes.EngineProcesses`
    asks for. `names` maps each replica's name (``model@port``) to its upstream's name."""

    def __init__(self, supervisor: Supervisor, names: Mapping[str, str]) -> None:
        self.supervisor = supervisor
        self.names = dict(names)
        self._wrapped: dict[Any, Callable[[str, dict[str, object]], None]] = {}

    @property
    def replicas(self) -> Sequence[Replica]:
        return tuple(self.supervisor.replicas)

    def snapshot(self) -> dict[str, Mapping[str, Any]]:
        states = self.supervisor.snapshot()
        return {self.names[r]: view for r, view in states.items() if r in self.names}

    def subscribe(self, callback: Callable[[str, Mapping[str, Any]], None]) -> None:
        def renamed(replica: str, view: dict[str, object]) -> None:
            if replica in self.names:
                callback(self.names[replica], view)

        self._wrapped[callback] = renamed
        self.supervisor.subscribe(renamed)

    def unsubscribe(self, callback: Callable[[str, Mapping[str, Any]], None]) -> None:
        renamed = self._wrapped.pop(callback, None)
        if renamed is not None:
            self.supervisor.unsubscribe(renamed)


def launched(config: Config) -> list[Upstream]:
    return [u for u in config.upstreams if u.launch is not None]


def run_dir(config: Config) -> Path:
    return config.root / "var" / "engines"


@contextlib.contextmanager
def launch_local(
    config: Config,
    echo: Callable[[str], None] = print,
    command: Callable[[LaunchSpec], Sequence[str]] | None = None,
    **supervise: Any,
) -> Iterator[LocalEngines]:
    """Start every launchable upstream, wait until all are healthy, watch them (a dead one is
    restarted), stop them all on exit. `command` and `supervise` go to the `Supervisor`
    (argv per spec; restart policy, sleep, clock); `spec_for`'s weights are skipped when
    `command` is given, for engines that are not the real servers (tests)."""
    upstreams = launched(config)
    if upstreams:
        echo(f"plumbline: preparing weights for {len(upstreams)} local replica(s)…")
    specs = [spec_for(config, u, "unused" if command else None) for u in upstreams]
    names = {replica_name(spec): u.name for spec, u in zip(specs, upstreams, strict=True)}
    timeout = max((u.launch.startup_timeout_s for u in upstreams if u.launch), default=300.0)
    if command is not None:
        supervise["command"] = command
    supervisor = Supervisor(specs, run_dir(config), timeout=timeout, **supervise)
    if not upstreams:
        yield LocalEngines(supervisor, names)
        return
    echo("plumbline: starting " + ", ".join(f"{s.engine} {replica_name(s)}" for s in specs))
    with supervisor as replicas:
        for replica in replicas:
            seconds = supervisor.startup_seconds.get(replica.name, 0.0)
            echo(f"plumbline: {replica.name} healthy after {seconds:.1f}s (log {replica.log_path})")
            for line in backend_lines(replica.log_path)[:8]:
                echo(f"  {line.strip()[-160:]}")
        yield LocalEngines(supervisor, names)
