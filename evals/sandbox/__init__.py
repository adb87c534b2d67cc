"""The sandbox: run untrusted Python (a model's code plus its tests) in a confined child process.

Never `exec` model code in the evaluator. Each run gets a fresh temporary directory and a child
interpreter (`python -I -S -B evals/sandbox/child.py`, a minimal environment, stdin closed,
stdout/stderr to files) that confines itself before the code runs:

    limits      RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE, soft = hard, and a
                wall-clock timeout after which the process group is killed (a timeout is a fail)
    kernel      Landlock + seccomp (+ a network namespace where allowed): see `probe.py` for
                what each holds and the chain; without both, code is refused (`SandboxRefused`)
    proof       a pass is a random nonce, made here and handed over a pipe, that the child writes
                back on a second pipe only after the code returned normally (`run_python`) or
                the dataset's `check(candidate)` returned (`run_check`) — never the exit status,
                so sys.exit(0), os._exit(0) or SystemExit before the end is a fail
    candidate   in `run_check` the model's function is called through a guard that accepts only
                plain built-in values (exact types), so an object whose `__eq__` always answers
                True is refused; the stdlib the tests use is put back after every call

The mechanism is chosen once per process (`mechanism()`) and reported with every result.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from evals.sandbox import probe

Status = Literal["passed", "failed", "timeout"]

CHILD = Path(__file__).with_name("child.py")
OUTPUT_TAIL = 4000  # characters of stdout/stderr kept in the result


class SandboxRefused(RuntimeError):
    """No isolation mechanism on this machine: the code was not run. Not a right or wrong
    answer; the runner records the item as an `error` of this class."""

    error_class = "sandbox_refused"


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
    """Run `program` confined; passed means it ran to its end (proof received) in time."""
    return _run({"program.py": program}, {"mode": "program"}, limits)


def run_check(setup: str, tests: str, entry_point: str, limits: Limits = Limits()) -> Result:
    """Run `setup` (the model's code) confined, then the dataset's `tests`, which define
    `check(candidate)`, in a namespace of their own; passed means `check` returned on the
    guarded `entry_point` (proof received) in time."""
    files = {"program.py": setup, "tests.py": tests}
    return _run(files, {"mode": "check", "entry_point": entry_point}, limits)


def isolation() -> str:
    """What code runs under on this machine, e.g. 'landlock(abi 7)+seccomp+netns', or
    'refused'."""
    return "refused" if refused() else mechanism().name


def refused() -> str | None:
    """Why code items are refused on this machine, or None."""
    chosen = mechanism()
    return chosen.refused or _smoke_failure()


def describe() -> dict[str, object]:
    """For a run's metadata: the mechanism and, where code is refused, why."""
    return {"isolation": isolation(), "refused": refused()}


def mechanism() -> probe.Mechanism:
    return probe.chosen()


@cache
def _smoke_failure() -> str | None:
    """One confined child, run once: it must come back with its proof."""
    if mechanism().refused:
        return mechanism().refused
    for _ in range(2):  # once more, so that a passing hiccup (a busy machine) refuses nothing
        result = _spawn({"program.py": "pass"}, {"mode": "program"}, Limits())
        if result.passed:
            return None
    detail = (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return f"sandbox refused: the confined child did not start ({detail})"


def _run(files: dict[str, str], config: dict[str, object], limits: Limits) -> Result:
    reason = refused()
    if reason:
        raise SandboxRefused(reason)
    return _spawn(files, config, limits)


def _spawn(files: dict[str, str], config: dict[str, object], limits: Limits) -> Result:
    chosen = mechanism()
    nonce = secrets.token_hex(32).encode()
    nonce_r, nonce_w = os.pipe()
    proof_r, proof_w = os.pipe()
    pending = [nonce_r, proof_r, proof_w]  # the descriptors still ours to close
    try:
        try:
            os.write(nonce_w, nonce)
        finally:
            os.close(nonce_w)  # the child reads the nonce to its end
        with tempfile.TemporaryDirectory(prefix="plumbline-sandbox-") as tmp:
            work = Path(tmp)
            returncode = _start(work, files, config, limits, chosen, (nonce_r, proof_w))
            for fd in (nonce_r, proof_w):  # the child's copies are all that is left
                pending.remove(fd)
                os.close(fd)
            pending.remove(proof_r)
            proof = _read_all(proof_r)
            stdout, stderr = (_tail(work / name) for name in ("stdout", "stderr"))
    finally:
        for fd in pending:
            os.close(fd)
    if proof == nonce:
        status: Status = "passed"
    elif returncode is None or returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        status = "timeout"
    else:
        status = "failed"
    return Result(status, returncode, stdout, stderr, chosen.name)


def _start(
    work: Path,
    files: dict[str, str],
    config: dict[str, object],
    limits: Limits,
    chosen: probe.Mechanism,
    pipes: tuple[int, int],
) -> int | None:
    """Write the run's files, build its Landlock ruleset, run the child to its end."""
    from evals.sandbox import policy  # needs landlockpy/seccompy, which the probe found

    for name, text in files.items():
        (work / name).write_text(text, encoding="utf-8")
    (work / "filter.bpf").write_bytes(policy.seccomp_program(chosen.landlock_abi >= 6))
    rules = policy.ruleset(work)
    try:
        child_config = {
            **config,
            **_rlimits(limits),
            "nonce_fd": pipes[0],
            "proof_fd": pipes[1],
            "landlock_fd": rules.fileno(),
        }
        lines = "".join(f"{key}={value}\n" for key, value in child_config.items())
        (work / "config.txt").write_text(lines, encoding="utf-8")
        return _wait(work, chosen.netns_prefix, (*pipes, rules.fileno()), limits)
    finally:
        rules.close()


def _wait(work: Path, prefix: tuple[str, ...], fds: tuple[int, ...], limits: Limits) -> int | None:
    with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
        child = subprocess.Popen(
            [*prefix, sys.executable, "-I", "-S", "-B", str(CHILD), "config.txt"],
            cwd=work,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(work),
                "LANG": "C.UTF-8",
                "TMPDIR": str(work),
            },
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=fds,
            process_group=0,
        )
        try:
            return child.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            return None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _rlimits(limits: Limits) -> dict[str, int]:
    return {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_CORE": 0,
    }


def _read_all(fd: int) -> bytes:
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data


def _tail(path: Path) -> str:
    data = path.read_bytes()[-OUTPUT_TAIL:]
    return data.decode("utf-8", errors="replace")
