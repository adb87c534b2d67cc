"""From the config to running local replicas: what `plumbline up` starts.

Each `[[upstreams]]` entry with a `launch` table becomes a `LaunchSpec`: the engine, the weights
(a Hugging Face folder converted once from the GGUF for vLLM, the GGUF for llama.cpp), host and
port from the upstream's `base_url`, and the profile's parsers, flags and environment.
`launch_local` yields `LocalEngines`: the replicas, and the gateway's narrow read of their
supervisor (each engine's state, restarts and last exit status, by upstream name).
`SERVE_OPTIONS` is how the gateway's own HTTP server runs, as `plumbline serve` passes it to
uvicorn (`serve` in this process, `serve_workers` as several worker processes on one port) and
as `gateway_command` spells it on a uvicorn command line (a process of its own: the benchmarks).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from deploy.engine import LaunchSpec
from deploy.localmodel import ensure_hf_model, gguf_path
from deploy.supervisor import Replica, Supervisor, backend_lines, replica_name
from gateway.config import LANE_KEY_VAR, Config, Profile, Upstream
from gateway.config.server import ServerConfig
from gateway.edge.access import new_key
from gateway.edge.connection import start_limits

SERVE_OPTIONS: dict[str, Any] = {
    "loop": "uvloop",
    # uvicorn's httptools protocol with a proxy's connection limits (docs/limits.md); each
    # process takes them from its app (`app.state.connection_limits`, set by `bound`).
    "http": "gateway.edge.connection:BoundedHttp",
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


def bound(app: Any, server: ServerConfig) -> str:
    """Give `app` the connection limits of `server` (the open-files limit raised first, the
    connection limit fitted to it: `gateway/edge/connection.py`); the line saying so."""
    limits, line = start_limits(server)
    app.state.connection_limits = limits
    return line


def serve(
    app: Any, host: str, port: int, server: ServerConfig, echo: Callable[[str], None] = print
) -> None:
    """Serve `app` as `plumbline serve` and `plumbline up` do (`SERVE_OPTIONS`), with the
    connection limits of `server`."""
    echo(f"plumbline: {bound(app, server)}")
    _Server(uvicorn.Config(app, host=host, port=port, **SERVE_OPTIONS)).run()


# What each worker process imports and calls: the config path comes from PLUMBLINE_CONFIG.
GATEWAY_FACTORY = "gateway.edge.app:app_from_env"


def workers_problems(config: Config) -> list[str]:
    """Why `config` cannot be served by several workers: each worker keeps what is not in the
    record store to itself, so without a shared store a limit would hold per worker (N times
    over) and every worker would run its own eval rounds. Empty when it can."""
    store = config.store
    if store.enabled and not _in_memory(store.url):
        return []
    why = "is off" if not store.enabled else f"is in memory ({store.url})"
    needs = [
        f"key {k.id!r}'s budget"
        for k in config.access.keys
        if k.requests_per_window is not None or k.tokens_per_window is not None
    ]
    needs += [f"{name}'s shadow budget" for name, r in config.models.items() if r.shadow]
    needs += [
        f"{name}'s quality gate"
        for name, r in config.models.items()
        if r.policy == "cheapest_within_floor"
    ]
    if config.evals.every_hours > 0:
        needs.append("the scheduled eval rounds")
    if config.access.store_keys:
        needs.append("the store keys")
    if not needs and store.enabled:  # in memory: every worker would keep records of its own
        needs.append("the records")
    return [f"{n} would be kept per worker: [store] {why}" for n in needs]


def _in_memory(url: str) -> bool:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:")


class _Workers(Multiprocess):
    """uvicorn's supervisor of several workers (it restarts one that died, and stops them all on
    SIGINT or SIGTERM), that also drops a dead worker's live gauges (in-flight requests, upstream
    health) from prometheus-client's folder, so /metrics stops adding them in; its counters
    stay, so totals never go back."""

    def __init__(self, config: uvicorn.Config, sockets: list[Any], metrics_dir: Path) -> None:
        super().__init__(config, sockets)
        self.metrics_dir = metrics_dir

    def _pids(self) -> set[int]:
        return {p.pid for p in self.processes if p.pid is not None}

    def _forget_gone(self, before: set[int]) -> None:
        from prometheus_client import multiprocess

        for pid in before - self._pids():
            multiprocess.mark_process_dead(pid, str(self.metrics_dir))

    def keep_subprocess_alive(self) -> None:
        before = self._pids()
        super().keep_subprocess_alive()
        self._forget_gone(before)

    def restart_all(self) -> None:
        before = self._pids()
        super().restart_all()
        self._forget_gone(before)

    def handle_ttou(self) -> None:
        before = self._pids()
        super().handle_ttou()
        self._forget_gone(before)

    @property
    def failed_to_start(self) -> bool:
        return any(p.exitcode == STARTUP_FAILURE for p in self.processes)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the worker processes started inside (spawned: they inherit
    this process's environment), and restore them after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def metrics_folder() -> Iterator[Path]:
    """The folder prometheus-client's multiprocess mode keeps each worker's values in: the
    user's PROMETHEUS_MULTIPROC_DIR as it is, else a fresh private one, removed after."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given)
        return
    folder = Path(tempfile.mkdtemp(prefix="plumbline-metrics-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class ServeError(Exception):
    """Why the gateway cannot be served so: a message for the user."""


def _migrate_once(config: Config) -> None:
    """The store's schema brought up to date here, before any worker opens it (SQLite has no
    lock to serialise workers migrating together)."""
    import sqlalchemy as sa

    from gateway.ledger.store import Store

    try:
        Store.from_config(config).close()
    except sa.exc.SQLAlchemyError as e:
        reason = str(getattr(e, "orig", None) or e).splitlines()[0]
        raise ServeError(f"store error: {reason}") from None


def serve_workers(
    config: Config,
    config_path: Path,
    host: str,
    port: int,
    workers: int,
    echo: Callable[[str], None] = print,
) -> int:
    """Serve the gateway as `workers` processes on one port (`plumbline serve --workers N`):
    refused (`ServeError`) where `workers_problems` says a limit would split; the store
    migrated once; then uvicorn's supervisor binds the socket, starts each worker on
    `GATEWAY_FACTORY` with `SERVE_OPTIONS` and the config at `config_path`, replaces one that
    dies, and on SIGINT or SIGTERM stops them all gracefully. The exit status: 0, or uvicorn's
    startup failure (3) when a worker could not start."""
    problems = workers_problems(config)
    if problems:
        raise ServeError(
            f"cannot serve with {workers} workers: " + "; ".join(problems) + ". Enable the "
            "[store] (a file or PostgreSQL), or serve with --workers 1."
        )
    if config.store.enabled:
        _migrate_once(config)
    # Raised here, the open-files limit is each worker's too (each fits its own limits to it).
    echo(f"plumbline: each worker: {start_limits(config.server)[1]}")
    with metrics_folder() as folder:
        # The workers read the config from its file, and where they listen from these.
        env = {"PLUMBLINE_CONFIG": str(config_path.resolve())}
        env |= {"PLUMBLINE_HOST": host, "PLUMBLINE_PORT": str(port)}
        env["PLUMBLINE_SUPERVISOR"] = str(os.getpid())  # each worker ends with this process
        # One eval-lane credential for every worker: a round's requests land on any of them.
        env[LANE_KEY_VAR] = config.evals.lane_key() or new_key()
        with _environment(**env, PROMETHEUS_MULTIPROC_DIR=str(folder)):
            server = uvicorn.Config(
                GATEWAY_FACTORY,
                factory=True,
                host=host,
                port=port,
                workers=workers,
                **SERVE_OPTIONS,
            )
            sock = server.bind_socket()
            try:
                supervisor = _Workers(server, [sock], folder)
                supervisor.run()
            finally:
                sock.close()
    return STARTUP_FAILURE if supervisor.failed_to_start else 0


def gateway_command(
    port: int, *, host: str = "127.0.0.1", workers: int = 1, python: str = sys.executable
) -> list[str]:
    """The argv of `uvicorn --factory gateway.edge.app:app_from_env` with `SERVE_OPTIONS` (the
    config path comes from the PLUMBLINE_CONFIG variable)."""
    argv = [python, "-m", "uvicorn", "--factory", GATEWAY_FACTORY]
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
    if not vllm and profile is not None:
        extra_args = [*template_args(profile), *extra_args]
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


def template_args(profile: Profile) -> list[str]:
    """llama-cpp-python's server takes chat-template variables once, at launch (not per
    request): the profile's thinking switch and reasoning effort go there, so the replica renders
    what the gateway's dialect table says it carries (gateway/serving/dialect.py)."""
    kwargs = dict(profile.chat_template_kwargs)
    if profile.reasoning_effort is not None:
        kwargs["reasoning_effort"] = profile.reasoning_effort
    return ["--chat_template_kwargs", json.dumps(kwargs, sort_keys=True)] if kwargs else []


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
