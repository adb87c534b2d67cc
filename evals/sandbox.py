"""The sandbox: run untrusted Python (a model's code plus its tests) in a separate process.

Never `exec` model code in the evaluator. `run_python` writes the program into a fresh temporary
directory and runs it in a child interpreter with these layers:

    network     a new, empty network namespace (`unshare --net`) where the kernel allows it,
                and in every case an audit hook that refuses sockets
    processes   the audit hook refuses fork / exec / spawn; RLIMIT_NPROC caps the rest
    resources   RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC set soft = hard in the child
                before the program runs (the child cannot raise them back)
    time        a wall-clock timeout; the whole process group is killed, and a timeout is a fail
    environment `python -I -S` (no site-packages, no PYTHON* variables), a minimal environment,
                stdin closed, stdout/stderr to files in the temporary directory

Which network layer is available is probed once (`isolation()`) and reported with every result.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

Status = Literal["passed", "failed", "timeout"]

# Runs in the child before the program: limits first, then the audit hook, then the program.
BOOTSTRAP = """\
import resource, sys
for name, value in {limits!r}:
    resource.setrlimit(getattr(resource, name), (value, value))

_DENIED = ("socket.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
           "os.system", "subprocess.Popen", "pty.spawn")

def _guard(event, args):
    if event.startswith(_DENIED):
        raise PermissionError(f"sandbox: {{event}} is not allowed")

sys.addaudithook(_guard)
del resource, _guard
source = open("program.py", encoding="utf-8").read()
exec(compile(source, "program.py", "exec"), {{"__name__": "__main__"}})
"""

OUTPUT_TAIL = 4000  # characters of stdout/stderr kept in the result


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_seconds: int = 10
    wall_seconds: float = 20.0
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    processes: int = 32


@dataclass(frozen=True, slots=True)
class Result:
    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    isolation: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_python(program: str, limits: Limits = Limits()) -> Result:
    """Run `program` in a sandboxed child interpreter; passed means exit status 0 in time."""
    prefix, isolation = _network_prefix()
    rlimits = (
        ("RLIMIT_CPU", limits.cpu_seconds),
        ("RLIMIT_AS", limits.memory_bytes),
        ("RLIMIT_FSIZE", limits.file_bytes),
        ("RLIMIT_NPROC", limits.processes),
    )
    with tempfile.TemporaryDirectory(prefix="plumbline-sandbox-") as tmp:
        work = Path(tmp)
        (work / "program.py").write_text(program, encoding="utf-8")
        (work / "bootstrap.py").write_text(BOOTSTRAP.format(limits=rlimits), encoding="utf-8")
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            child = subprocess.Popen(
                [*prefix, sys.executable, "-I", "-S", "-B", "bootstrap.py"],
                cwd=work,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8", "TMPDIR": tmp},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                process_group=0,
            )
            try:
                returncode: int | None = child.wait(timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                _kill_group(child)
        stdout, stderr = (_tail(work / name) for name in ("stdout", "stderr"))
    if returncode is None or returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        status: Status = "timeout"
    else:
        status = "passed" if returncode == 0 else "failed"
    return Result(status, returncode, stdout, stderr, isolation)


def isolation() -> str:
    """The network layer this machine gives the sandbox: 'netns' or 'audit-hook only'."""
    return _network_prefix()[1]


@cache
def _network_prefix() -> tuple[tuple[str, ...], str]:
    unshare = shutil.which("unshare")
    candidates = [("--net",), ("--net", "--map-root-user")] if unshare else []
    for flags in candidates:
        prefix = (str(unshare), *flags)
        probe = subprocess.run(
            [*prefix, sys.executable, "-I", "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        if probe.returncode == 0:
            return tuple(str(p) for p in prefix), "netns"
    return (), "audit-hook only"


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(path: Path) -> str:
    data = path.read_bytes()[-OUTPUT_TAIL:]
    return data.decode("utf-8", errors="replace")
