import os
from pathlib import Path

import pytest

from evals import sandbox
from evals.sandbox import (
    Limits,
    SandboxRefused,
    isolation,
    mechanism,
    policy,
    run_check,
    run_python,
)

FAST = Limits(cpu_seconds=2, wall_seconds=5, memory_bytes=256 << 20, file_bytes=1 << 20)

# ctypes and the libc calls the audit hook would refuse: used with the hook off, to show the
# kernel layers hold on their own.
LIBC = "import ctypes, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
CONNECT = (
    LIBC + "fd = libc.socket(2, 1, 0)\n"
    "assert fd >= 0, 'socket refused'\n"
    "addr = struct.pack('=HH4s8x', 2, 0x3500, bytes([1, 1, 1, 1]))\n"
    "assert libc.connect(fd, addr, len(addr)) == 0, 'connect refused'\n"
)


def kernel_only(program: str) -> sandbox.Result:
    """The program confined by the kernel layers alone (the audit hook left out)."""
    return sandbox._spawn({"program.py": program}, {"mode": "program", "audit_hook": 0}, FAST)


def test_this_machine_has_a_mechanism_and_reports_it() -> None:
    assert isolation().startswith("landlock(abi ") and "+seccomp" in isolation()
    assert sandbox.refused() is None
    assert sandbox.describe() == {"isolation": isolation(), "refused": None}


def test_a_clean_program_passes_and_its_output_is_kept() -> None:
    result = run_python("print(6 * 7)", FAST)
    assert result.passed and result.stdout.strip() == "42" and result.isolation == isolation()


def test_a_failing_assertion_fails() -> None:
    result = run_python("assert 1 == 2, 'nope'", FAST)
    assert result.status == "failed" and "nope" in result.stderr


@pytest.mark.parametrize(
    "program",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "raise SystemExit",
        "raise SystemExit(0)",
        "exit()",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        "import os\nos.close(1)\nos.close(2)\nos._exit(0)",
    ],
)
def test_an_exit_before_the_end_is_not_a_pass(program: str) -> None:
    assert not run_python(program + "\nprint('the end')", FAST).passed


def test_the_proof_cannot_be_forged_by_writing_to_its_pipe() -> None:
    # Every inherited descriptor gets junk; the nonce itself is in no file or descriptor.
    program = (
        "import os\n"
        "for fd in range(3, 20):\n"
        "    try:\n        os.write(fd, b'0' * 64)\n    except OSError:\n        pass\n"
        "os._exit(0)\n"
    )
    assert not run_python(program, FAST).passed
    assert not kernel_only(program).passed


# Walks every frame up the stack and every closure and default it finds (two levels), writes
# every string or bytes value of a nonce's length to every descriptor, then raises the proof
# event itself and exits with status 0.
FORGER = """
import os, sys
found, seen = [], set()
def look(value, depth=0):
    if id(value) in seen or depth > 2:
        return
    seen.add(id(value))
    if isinstance(value, (str, bytes)) and len(value) == 64:
        found.append(value.encode() if isinstance(value, str) else value)
    elif isinstance(value, dict):
        for v in list(value.values()):
            look(v, depth + 1)
    elif callable(value):
        for cell in getattr(value, '__closure__', None) or ():
            try:
                look(cell.cell_contents, depth + 1)
            except ValueError:
                pass
        for v in getattr(value, '__defaults__', None) or ():
            look(v, depth + 1)
frame = sys._getframe()
while frame is not None:
    look(frame.f_locals)
    look(frame.f_globals)
    frame = frame.f_back
for data in found:
    for fd in range(3, 30):
        try:
            os.write(fd, data)
        except OSError:
            pass
try:
    sys.audit('plumbline.sandbox.proof')
except PermissionError:
    pass
os._exit(0)
"""


@pytest.mark.parametrize(
    "program",
    [
        FORGER,
        "import gc\ngc.get_objects()",
        "import gc\ngc.get_referrers(gc)",
        "import sys\nsys.settrace(lambda *a: None)",
        "import ctypes\nctypes.string_at(id(0), 8)",
        "print(open('/proc/self/mem', 'rb'))",
        "import sys\nsys.audit('plumbline.sandbox.proof')",
    ],
)
def test_the_proof_cannot_be_found_or_raised_by_the_code(program: str) -> None:
    assert not run_python(program, FAST).passed
    assert not run_check(program + "\ndef f():\n    return 1\n", CHECK_F, "f", FAST).passed


CHECK_F = "def check(candidate):\n    assert candidate() == 1\n"


def test_the_code_cannot_add_an_audit_hook_of_its_own() -> None:
    # The interpreter drops a hook that an existing hook refuses, silently.
    program = "import sys\nsys.addaudithook(lambda *a: print('hooked'))\nopen('x', 'w')"
    result = run_python(program, FAST)
    assert result.passed and "hooked" not in result.stdout


def test_ordinary_code_that_inspects_frames_still_runs() -> None:
    program = (
        "import collections, enum, inspect, sys, traceback, typing\n"
        "P = collections.namedtuple('P', 'a b')\n"
        "class N(typing.NamedTuple):\n    a: int\n"
        "E = enum.Enum('E', 'x y')\n"
        "assert inspect.currentframe() is not None and sys._getframe(0)\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()\n"
        "print(P(1, 2), N(3), E.x)\n"
    )
    result = run_python(program, FAST)
    assert result.passed, result.stderr
    assert "P(a=1, b=2) N(a=3) E.x" in result.stdout and "ZeroDivisionError" in result.stderr


def test_a_cpu_loop_is_a_timeout() -> None:
    assert run_python("while True:\n    pass", FAST).status == "timeout"


def test_a_sleeping_program_is_killed_at_the_wall_clock() -> None:
    result = run_python("import time\ntime.sleep(60)", Limits(cpu_seconds=5, wall_seconds=1))
    assert result.status == "timeout"


def test_memory_and_file_size_are_limited() -> None:
    assert run_python("x = bytearray(1 << 30)", FAST).status == "failed"
    assert not run_python("open('f', 'wb').write(b'x' * (2 << 20))", FAST).passed
    raise_back = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (1 << 34, 1 << 34))"
    assert not kernel_only(raise_back).passed


@pytest.mark.parametrize(
    "program",
    [
        "import os\nwhile True:\n    os.fork()",
        "import threading, time\nfor _ in range(10000):\n"
        "    threading.Thread(target=time.sleep, args=(5,)).start()",
        "x = []\nwhile True:\n    x.append(bytearray(1 << 24))",
        "import subprocess\nsubprocess.run(['sh', '-c', 'echo out'], check=True)",
        "import os\nassert os.system('true') == 0",
        LIBC + "assert libc.system(b'true') == 0",
        "import os\nos.execv('/bin/true', ['true'])",
    ],
)
def test_no_new_process_with_or_without_the_audit_hook(program: str) -> None:
    assert not run_python(program, FAST).passed
    assert not kernel_only(program).passed


@pytest.mark.parametrize(
    "program",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.sendto(b'x', ('1.1.1.1', 53))",
        CONNECT,
    ],
)
def test_no_network_with_or_without_the_audit_hook(program: str) -> None:
    assert not run_python(program, FAST).passed
    assert not kernel_only(program).passed


def _outside_writes(outside: Path) -> list[str]:
    victim = outside / "victim.txt"
    return [
        f"open({str(outside / 'new.txt')!r}, 'w').write('x')",
        f"import os\nos.remove({str(victim)!r})",
        f"import os\nos.rename({str(victim)!r}, 'stolen.txt')",
        f"open({str(victim)!r}, 'a').write('x')",
        f"import os\nos.mkdir({str(outside / 'd')!r})",
        f"import os\nos.symlink('/etc/passwd', {str(outside / 'link')!r})",
        "open('/tmp/plumbline-sandbox-escape', 'w').write('x')",
    ]


def test_no_write_or_delete_outside_the_temp_dir(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for program in _outside_writes(tmp_path):
        assert not run_python(program, FAST).passed, program
        assert not kernel_only(program).passed, program
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "keep"
    assert not Path("/tmp/plumbline-sandbox-escape").exists()


def test_switching_off_the_audit_hook_then_a_shell_gets_nowhere(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    program = (
        "import sys\n"
        "sys.modules['__main__']._DENIED = ()\n"
        f"import os\nos.system('touch {target}')\n"
    )
    assert not run_python(program, FAST).passed
    assert not kernel_only(f"import os\nassert os.system('touch {target}') == 0").passed
    assert not target.exists()


def test_files_outside_the_interpreter_and_temp_dir_are_not_readable(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("hunter2")
    for path in (secret, Path("/etc/hostname"), Path("/proc/self/mem")):
        result = kernel_only(f"print(open({str(path)!r}, 'rb').read(8))")
        assert not result.passed and "hunter2" not in result.stdout, path


def test_the_temp_dir_is_writable_and_the_environment_is_bare() -> None:
    program = (
        "import os, sys, json, math\n"
        "open('scratch.txt', 'w').write('ok')\n"
        "os.remove('scratch.txt')\n"
        "listed = ['config.txt', 'filter.bpf', 'program.py', 'stderr', 'stdout']\n"
        "assert sorted(os.listdir('.')) == listed\n"
        "assert 'PYTHONPATH' not in os.environ and 'HTTP_PROXY' not in os.environ\n"
        "assert not any('site-packages' in p for p in sys.path)\n"
    )
    result = run_python(program, FAST)
    assert result.passed, result.stderr


def test_check_passes_only_when_check_returns_on_plain_values() -> None:
    tests = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"
    assert run_check("def sq(x):\n    return x * x\n", tests, "sq", FAST).passed
    assert not run_check("def sq(x):\n    return x + 2\n", tests, "sq", FAST).passed
    assert not run_check("def other(x):\n    return x * x\n", tests, "sq", FAST).passed


def test_refused_when_the_probe_finds_no_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    none = sandbox.probe.Mechanism(landlock_abi=0, seccomp=False, netns_prefix=())
    monkeypatch.setattr(sandbox.probe, "chosen", lambda: none)
    sandbox._smoke_failure.cache_clear()
    try:
        assert isolation() == "refused"
        reason = sandbox.refused()
        assert reason and "no Landlock" in reason and "no seccomp" in reason
        with pytest.raises(SandboxRefused, match="sandbox refused") as raised:
            run_python("print(1)", FAST)
        assert raised.value.error_class == "sandbox_refused"
        assert sandbox.describe() == {"isolation": "refused", "refused": reason}
    finally:
        monkeypatch.undo()
        sandbox._smoke_failure.cache_clear()
    assert mechanism().name == isolation() != "refused"


def test_refused_when_the_packages_are_missing() -> None:
    bare = sandbox.probe.Mechanism(landlock_abi=7, seccomp=True, netns_prefix=(), packages=False)
    assert bare.refused and "landlockpy and seccompy packages are not installed" in bare.refused
    assert sandbox.probe.packages_installed()


def test_refused_when_only_one_layer_is_there() -> None:
    half = sandbox.probe.Mechanism(landlock_abi=7, seccomp=False, netns_prefix=())
    assert half.refused and "no seccomp" in half.refused and "Landlock" not in half.refused
    half = sandbox.probe.Mechanism(landlock_abi=0, seccomp=True, netns_prefix=("unshare",))
    assert half.refused and "no Landlock" in half.refused


def test_signals_are_refused_by_seccomp_where_landlock_cannot_scope_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    program = "import os\nos.kill(os.getpid(), 0)"
    assert run_python(program, FAST).passed  # Landlock ABI 6+ keeps signals in the domain
    real = mechanism()
    older = sandbox.probe.Mechanism(5, real.seccomp, real.netns_prefix)
    monkeypatch.setattr(sandbox.probe, "chosen", lambda: older)
    result = run_python(program, FAST)
    assert result.status == "failed" and "Operation not permitted" in result.stderr


def test_refused_when_the_confined_child_does_not_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kernel says yes, but the confined child never proves it ran (twice): refused, with
    # the child's own last words.
    crashed = sandbox.Result("failed", 1, "", "OSError: sandbox: seccomp failed: EINVAL", "x")
    monkeypatch.setattr(sandbox, "_spawn", lambda *a: crashed)
    sandbox._smoke_failure.cache_clear()
    try:
        reason = sandbox.refused()
        assert reason == (
            "sandbox refused: the confined child did not start "
            "(OSError: sandbox: seccomp failed: EINVAL)"
        )
        assert isolation() == "refused"
        with pytest.raises(SandboxRefused, match="did not start"):
            run_check("def f():\n    return 1\n", CHECK_F, "f", FAST)
    finally:
        monkeypatch.undo()
        sandbox._smoke_failure.cache_clear()
    assert sandbox.refused() is None


def test_no_descriptor_is_left_open_by_a_run_that_passes_fails_or_breaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    run_python("pass", FAST)
    run_python("import os\nos._exit(3)", FAST)
    monkeypatch.setattr(policy, "ruleset", lambda work: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_python("pass", FAST)
    assert open_fds() == before
