"""The benchmark's processes: the fake upstream and each proxy under test, and what they cost.

Every process runs in its own session on loopback, so it and any workers it forks are one tree:
CPU time (utime + stime from ``/proc/<pid>/stat``) and peak RSS (``VmHWM``) are summed over the
live tree. Each proxy is configured from a file written to a scratch folder.

Every proxy that can check a client's key is given the same one (`BENCH_KEY`) and checks it on
every request, so none is measured open against another guarded: plumbline (a client key in
`[access].keys`, by sha256), LiteLLM (its master key) and the floor relays (`--key`: one
constant-time comparison). vllm-router has no check of client keys (its `--api-key` is the key
it sends to its workers) and the fake upstream (`direct`) is the upstream itself: both run open.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from deploy.launch import gateway_command

ROOT = Path(__file__).resolve().parent.parent
MODEL = "fake-model"
BENCH_KEY = "sk-bench-local"  # the key every guarded proxy checks; loopback only
BENCH_HEADERS = {"Authorization": f"Bearer {BENCH_KEY}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stat(pid: int, thread: int | None = None) -> list[str] | None:
    """The fields of `pid`'s /proc stat after its name (of one of its threads, `thread`)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid`'s live process tree."""
    ticks = 0
    for p in tree(pid):
        if fields := _stat(p):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def loop_seconds(pid: int) -> float:
    """User + system CPU seconds of the main threads of `pid`'s live process tree: the event
    loops' own (a gateway process runs its loop there), without its threads' (the record
    queue's writer, the upkeep's)."""
    ticks = 0
    for p in tree(pid):
        if fields := _stat(p, p):  # a process's main thread has its id
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """Sum of the peak resident set (VmHWM) of `pid`'s live process tree, in MB."""
    total_kb = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def watch_pauses(out: TextIO) -> None:
    """Print each of this process's collector pauses of 2 ms or more to `out`, with when it
    ended (the lines `pauses` reads). `gc_watch` is the same as code for another process."""
    import gc  # imported here: `gc_watch` sends this function's source alone
    import time

    began = [0.0]

    def pause(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        ms = 1e3 * (time.perf_counter() - began[0])
        if ms >= 2.0:
            gen, freed = info["generation"], info["collected"]
            line = f"gc pause gen {gen} {ms:.1f} ms at {time.time():.3f} collected {freed}"
            print(line, file=out, flush=True)

    gc.callbacks.append(pause)


def gc_watch(out: str) -> str:
    """Python code (for `python -c`) that runs `watch_pauses(<out>)`, `out` an expression there
    (`sys.stderr`: the gateway's log); other code can follow it."""
    source = textwrap.dedent(inspect.getsource(watch_pauses))
    return f"from typing import TextIO\nimport sys\n{source}\nwatch_pauses({out})\n"


PAUSE = re.compile(r"^gc pause gen (\d) ([\d.]+) ms at ([\d.]+) collected \d+$", re.MULTILINE)


def pauses_by_generation(text: str) -> list[tuple[int, float, float]]:
    """(generation, start, end) of each collector pause `watch_pauses` printed in `text`."""
    return [(int(g), float(t) - float(ms) / 1e3, float(t)) for g, ms, t in PAUSE.findall(text)]


def pauses(text: str) -> list[tuple[float, float]]:
    """(start, end) of each collector pause `watch_pauses` printed in `text`."""
    return [(a, b) for _, a, b in pauses_by_generation(text)]


@dataclass
class Proc:
    """A started server: its process, its OpenAI base URL, the headers a client must send."""

    name: str
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path
    headers: dict[str, str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(15)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def launch(
    name: str,
    argv: list[str],
    base_url: str,
    scratch: Path,
    env: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    health: str = "/v1/models",
    timeout: float = 120.0,
    cwd: Path = ROOT,
) -> Proc:
    """Start `argv`, wait until `base_url`'s root answers `health`, return it."""
    log = scratch / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    proc = Proc(name, process, base_url, log, headers or {})
    root = base_url.removesuffix("/v1")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited {process.returncode}; see {log}")
        request = urllib.request.Request(root + health, headers=proc.headers)
        try:
            with urllib.request.urlopen(request, timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.3)
    proc.stop()
    raise RuntimeError(f"{name} not healthy after {timeout:.0f} s; see {log}")


def fake_upstream(scratch: Path) -> Proc:
    """The fast fake OpenAI upstream (no request log)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "plumbline_kit.fakes.upstream",
        "--no-record",
        "--port",
        str(port),
        "--model",
        MODEL,
    ]
    return launch("fake", argv, f"http://127.0.0.1:{port}/v1", scratch)


def set_fake_default(fake: Proc, behaviour: dict) -> None:
    """POST the fake's default behaviour (answer length, pacing) for the next scenario."""
    request = urllib.request.Request(
        fake.base_url.removesuffix("/v1") + "/_fake/default",
        data=json.dumps(behaviour).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        resp.read()


def plumbline(
    fake: Proc, scratch: Path, workers: int = 1, record: bool = True, tree: Path | None = None
) -> Proc:
    """Our gateway: ``plumbline serve`` (or uvicorn with `workers`) on a generated config.
    `record=False` turns the record store off (metrics stay on) to price recording. A client
    key (`BENCH_KEY`) guards the API, as LiteLLM's master key guards its. `tree`: another
    checkout of the repository to run the gateway from (a before, beside this after), with a
    store of its own (`plumbline-base.db`)."""
    port = free_port()
    stem = "plumbline" if tree is None else "plumbline-base"
    config = scratch / (f"{stem}.toml" if record else f"{stem}-norecord.toml")
    digest = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nhealth_interval_s = 5\n'
        f"ttft_timeout_s = 120\n\n"
        f'[[access.keys]]\nid = "bench"\nsha256 = "{digest}"\nrole = "client"\n\n'
        f'[store]\nurl = "sqlite:///{scratch}/{stem}.db"\n'
        f"enabled = {'true' if record else 'false'}\n\n"
        f'[[upstreams]]\nname = "fake"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
        f'model = "{MODEL}"\n\n[models.{MODEL}]\nupstreams = ["fake"]\n'
    )
    if workers > 1:
        argv = gateway_command(port, workers=workers)  # as `plumbline serve` runs
        env = {"PLUMBLINE_CONFIG": str(config), "PROMETHEUS_MULTIPROC_DIR": str(scratch / "prom")}
        (scratch / "prom").mkdir(exist_ok=True)
    else:
        argv = [
            sys.executable,
            "-c",  # its collector's pauses in its log (`gc_watch`): the bench counts them a round
            gc_watch("sys.stderr") + "from gateway.cli import app; app()",
            "serve",
            "--config",
            str(config),
        ]
        env = {}
    name = stem if workers == 1 else f"{stem}-w{workers}"
    name = name if record else f"{name}-norecord"
    return launch(
        name,
        argv,
        f"http://127.0.0.1:{port}/v1",
        scratch,
        env=env,
        headers=BENCH_HEADERS,
        cwd=ROOT if tree is None else tree,
    )


def litellm(fake: Proc, scratch: Path, venv: Path, workers: int = 1) -> Proc:
    """LiteLLM's proxy from its own virtualenv, with its documented production settings."""
    port = free_port()
    config = scratch / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {fake.base_url}\n"
        "      api_key: fake-key\n"
        "general_settings:\n"
        f"  master_key: {BENCH_KEY}\n"
        "  disable_spend_logs: true\n"
        "  disable_error_logs: true\n"
        "litellm_settings:\n"
        "  request_timeout: 600\n"
        "  set_verbose: false\n"
        "  json_logs: true\n"
    )
    argv = [
        str(venv / "bin" / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        str(workers),
    ]
    env = {"LITELLM_LOG": "ERROR", "LITELLM_MODE": "PRODUCTION", "NO_DOCS": "True"}
    return launch(
        "litellm",
        argv,
        f"http://127.0.0.1:{port}/v1",
        scratch,
        env=env,
        headers=BENCH_HEADERS,
        health="/health/liveliness",
        timeout=240,
    )


def vllm_router(fake: Proc, scratch: Path, venv: Path) -> Proc:
    """vllm-router (the Rust router from PyPI) with the fake as its only worker."""
    port = free_port()
    argv = [
        str(venv / "bin" / "vllm-router"),
        "--worker-urls",
        fake.base_url.removesuffix("/v1"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--policy",
        "round_robin",
    ]
    return launch("vllm-router", argv, f"http://127.0.0.1:{port}/v1", scratch, timeout=120)


def floor(fake: Proc, scratch: Path, wire: bool = False, late_head: bool = False) -> Proc:
    """bench/floor_proxy.py: uvicorn + aiohttp (or `gateway/serving/wire.py`) relaying to the fake
    with nothing else of ours. `late_head` (with `wire`): its head waits for the first block."""
    port = free_port()
    argv = [
        sys.executable,
        str(ROOT / "bench" / "floor_proxy.py"),
        "--upstream",
        fake.base_url.removesuffix("/v1"),
        "--port",
        str(port),
        "--key",
        BENCH_KEY,
        *(["--wire"] if wire else []),
        *(["--late-head"] if late_head else []),
    ]
    name = "floor-late" if late_head else "floor-wire" if wire else "floor"
    return launch(name, argv, f"http://127.0.0.1:{port}/v1", scratch, headers=BENCH_HEADERS)
