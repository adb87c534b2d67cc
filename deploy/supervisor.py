"""The supervisor: starts local engine processes, waits until they serve, and stops them.

Each replica runs in its own process group (so Ctrl-C at the terminal reaches only the
parent, which then stops the group with SIGTERM, then SIGKILL after a grace period) and writes
stdout and stderr to ``<run_dir>/<served name>-<port>.log``. The log stays after the process
ends; `backend_lines` reads the engine's "Using ... backend" choices from it.

    with Supervisor(specs, run_dir) as replicas:      # blocking; for a CLI
        serve(replicas)

    async with Supervisor(specs, run_dir) as replicas:  # from an asyncio lifespan
        yield

A replica that exits or does not answer its health probes in time raises `EngineStartError`
carrying the last lines of its log; the replicas already started are stopped first.

Once all are healthy, one thread per replica watches its process. An engine that exits while
serving is marked ``restarting`` and started again after a backoff, until the policy gives up
and marks it ``down`` (`deploy.restart`). `Supervisor.snapshot` says where each one stands and
`Supervisor.subscribe` hears every change (the gateway's ``/health`` and its routing read them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from deploy.engine import LaunchSpec, base_url, command, environment, health_paths
from deploy.restart import DEFAULT_POLICY, EngineState, RestartPolicy, exit_label

log = logging.getLogger("plumbline.supervisor")
BACKEND_LINE = re.compile(
    r"\bUsing\b.*\b(backend|kernel)\b|\bUsing FlashAttention version\b", re.IGNORECASE
)


class EngineStartError(RuntimeError):
    """A replica died or stayed unhealthy while starting; the message ends with its log tail."""

    def __init__(self, name: str, reason: str, log_path: Path, log_tail: str) -> None:
        super().__init__(f"{name}: {reason} (log: {log_path})\n--- last log lines ---\n{log_tail}")
        self.name = name
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail


def replica_name(spec: LaunchSpec) -> str:
    """The name of `spec`'s replica in messages, states and logs: served model name and port."""
    return f"{spec.served_model_name}@{spec.port}"


@dataclass
class Replica:
    """One running engine process and where its output goes."""

    spec: LaunchSpec
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def name(self) -> str:
        return replica_name(self.spec)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this replica, ending in ``/v1``."""
        return base_url(self.spec)


def start(
    spec: LaunchSpec,
    run_dir: Path,
    env: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
) -> Replica:
    """Start `spec`'s server in a new process group, logging to a file under `run_dir`.

    `argv` replaces the generated command line (e.g. to wrap it in ``taskset``).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / f"{spec.served_model_name.replace('/', '_')}-{spec.port}.log"
    full_env = environment(spec, os.environ if env is None else env)
    process = spawn(command(spec) if argv is None else argv, full_env, log_path)
    return Replica(spec=spec, process=process, log_path=log_path)


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Run `argv` as the leader of a new session, appending stdout and stderr to `log_path`.
    It is tethered (`deploy/tether.py`): if this process is killed outright, it gets SIGTERM."""
    tethered = [sys.executable, "-m", "deploy.tether", str(os.getpid()), "--", *argv]
    with log_path.open("ab") as log:
        return subprocess.Popen(
            tethered,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_healthy(
    replica: Replica,
    timeout: float = 300.0,
    interval: float = 0.5,
    cancelled: threading.Event | None = None,
) -> float:
    """Block until every health path of `replica` answers 200; return the seconds it took.

    Raises `EngineStartError` if the process exits first, `timeout` seconds pass, or
    `cancelled` is set.
    """
    started = time.monotonic()
    root = replica.base_url.removesuffix("/v1")
    paths = health_paths(replica.spec)
    with httpx.Client(base_url=root, timeout=5.0, trust_env=False) as client:
        while True:
            code = replica.process.poll()
            if code is not None:
                raise _start_error(replica, f"exited with status {code} while starting")
            if all(_answers(client, path) for path in paths):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise _start_error(replica, f"not healthy after {timeout:.0f} s")
            if cancelled is not None and cancelled.is_set():
                raise _start_error(replica, "start-up cancelled")
            time.sleep(interval)


def stop(replica: Replica, grace: float = 15.0) -> int | None:
    """SIGTERM the replica's process group, wait `grace` s, then SIGKILL it; return the status."""
    process = replica.process
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # the whole group is gone already
            break
        try:
            process.wait(wait)
            _reap_group(process.pid, wait)
            break
        except subprocess.TimeoutExpired:
            continue
    return process.poll()


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of the log at `path` (empty if it does not exist)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as log:
            return "".join(deque(log, maxlen=lines))
    except FileNotFoundError:
        return ""


def backend_lines(path: Path) -> list[str]:
    """Lines of an engine log that report a chosen backend or kernel ("Using ... backend")."""
    with path.open("r", encoding="utf-8", errors="replace") as log:
        return [line.rstrip("\n") for line in log if BACKEND_LINE.search(line)]


class Supervisor:
    """Starts a set of replicas, waits for all of them, and stops them all on exit.

    Usable as ``with`` (blocking) and ``async with`` (the blocking work runs in a thread).
    """

    def __init__(
        self,
        specs: Iterable[LaunchSpec],
        run_dir: Path,
        timeout: float = 300.0,
        grace: float = 15.0,
        command: Callable[[LaunchSpec], Sequence[str]] = command,
        policy: RestartPolicy | None = DEFAULT_POLICY,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`command` maps a spec to its argv; the default is `deploy.engine.command`.
        `policy` None leaves a dead engine dead. `sleep` waits out a backoff (default: a wait
        that `stop` cuts short); `clock` measures how long an engine lived."""
        self.command = command
        self.specs: tuple[LaunchSpec, ...] = tuple(specs)
        self.run_dir = run_dir
        self.timeout = timeout
        self.grace = grace
        self.policy = policy
        self.clock = clock
        self.replicas: list[Replica] = []
        self.startup_seconds: dict[str, float] = {}
        self.states: dict[str, EngineState] = {}
        self._cancelled = threading.Event()
        self._stopping = threading.Event()
        self.sleep = sleep or self._stopping.wait
        self._lock = threading.Lock()
        self._watchers: list[threading.Thread] = []
        self._subscribers: list[Callable[[str, dict[str, object]], None]] = []

    def start(self) -> Sequence[Replica]:
        """Start every replica, then wait for each; on any failure stop all and re-raise."""
        try:
            for spec in self.specs:
                self.replicas.append(start(spec, self.run_dir, argv=self.command(spec)))
            began = time.monotonic()
            for replica in self.replicas:
                left = max(1.0, self.timeout - (time.monotonic() - began))
                wait_healthy(replica, left, cancelled=self._cancelled)
                self.startup_seconds[replica.name] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        for index, replica in enumerate(self.replicas):
            self.states[replica.name] = EngineState(state="running")
            if self.policy is not None:
                watcher = threading.Thread(
                    target=self._watch,
                    args=(index, replica),
                    name=f"watch {replica.name}",
                    daemon=True,
                )
                self._watchers.append(watcher)
                watcher.start()
        return tuple(self.replicas)

    def stop(self) -> None:
        """Stop every started replica and its watcher (idempotent)."""
        self._stopping.set()
        with self._lock:  # no watcher starts a replica after this
            replicas, self.replicas[:] = list(self.replicas), []
        for replica in reversed(replicas):
            stop(replica, self.grace)
        for watcher in self._watchers:
            if watcher is not threading.current_thread():
                watcher.join(self.grace + 10.0)
        self._watchers.clear()
        with self._lock:
            for state in self.states.values():
                state.state = "stopped"

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Each replica's state, restarts and last exit status, by replica name."""
        with self._lock:
            return {name: state.view() for name, state in self.states.items()}

    def subscribe(self, callback: Callable[[str, dict[str, object]], None]) -> None:
        """Call `callback(replica name, its view)` (from a watcher thread) on every change."""
        self._subscribers.append(callback)

    def unsubscribe(self, callback: Callable[[str, dict[str, object]], None]) -> None:
        if callback in self._subscribers:
            self._subscribers.remove(callback)

    def _watch(self, index: int, replica: Replica) -> None:
        """Wait for replica `index` to exit; restart it as the policy says, until it gives up
        or `stop` is called. The restarted engine is spawned from this thread, which lives as
        long as it does (the tether follows the thread that spawned)."""
        assert self.policy is not None
        policy = self.policy
        name, spec = replica.name, replica.spec
        state = self.states[name]
        began = self.clock()
        while True:
            code = replica.process.wait()
            if self._stopping.is_set():
                return
            with self._lock:
                state.failures = policy.streak(state.failures, self.clock() - began)
                state.last_exit = exit_label(code)
                state.state = "down" if policy.gives_up(state.failures) else "restarting"
                failures = state.failures
            self._tell(name, state)
            if state.state == "down":
                log.error("%s exited (%s); down after %d restart(s)", name, code, state.restarts)
                return
            delay = policy.delay(failures)
            log.warning("%s exited (%s); restarting in %.0f s", name, state.last_exit, delay)
            self.sleep(delay)
            with self._lock:
                if self._stopping.is_set():
                    return
                replica = start(spec, self.run_dir, argv=self.command(spec))
                self.replicas[index] = replica
                state.restarts += 1
            began = self.clock()
            try:
                wait_healthy(replica, self.timeout, cancelled=self._stopping)
            except EngineStartError as e:
                if self._stopping.is_set():
                    return
                log.warning("%s: restart failed: %s", name, e.reason)
                stop(replica, self.grace)  # not healthy in time: the next loop sees it exit
                continue
            with self._lock:
                state.state = "running"
            self._tell(name, state)

    def _tell(self, name: str, state: EngineState) -> None:
        with self._lock:
            view = state.view()
        for callback in list(self._subscribers):
            try:
                callback(name, view)
            except Exception:
                log.exception("an engine-state subscriber failed")

    def __enter__(self) -> Sequence[Replica]:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Sequence[Replica]:
        starting = asyncio.ensure_future(asyncio.to_thread(self.start))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            self._cancelled.set()  # the thread notices, stops what it started, and raises
            await asyncio.gather(starting, return_exceptions=True)
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


def _answers(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def _reap_group(pgid: int, wait: float) -> None:
    """Wait until no live process is left in group `pgid` (engine workers outlive their parent)."""
    deadline = time.monotonic() + wait
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(f"process group {pgid}", wait)
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    """Whether group `pgid` has a member that is not a zombie (orphans may never be reaped)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _start_error(replica: Replica, reason: str) -> EngineStartError:
    return EngineStartError(replica.name, reason, replica.log_path, log_tail(replica.log_path))
