import pytest

from evals.sandbox import Limits, isolation, run_python

FAST = Limits(cpu_seconds=1, wall_seconds=3, memory_bytes=256 << 20, file_bytes=1 << 20)


def test_a_clean_program_passes_and_its_output_is_kept() -> None:
    result = run_python("print(6 * 7)", FAST)
    assert result.passed and result.stdout.strip() == "42"


def test_a_failing_assertion_fails() -> None:
    result = run_python("assert 1 == 2, 'nope'", FAST)
    assert result.status == "failed" and "nope" in result.stderr


def test_a_cpu_loop_is_a_timeout() -> None:
    assert run_python("while True:\n    pass", FAST).status == "timeout"


def test_a_sleeping_program_is_killed_at_the_wall_clock() -> None:
    result = run_python("import time\ntime.sleep(60)", Limits(cpu_seconds=5, wall_seconds=1))
    assert result.status == "timeout"


@pytest.mark.parametrize(
    "program",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        "import socket\nsocket.socket()",
        "import subprocess\nsubprocess.run(['curl', 'http://example.com'])",
        "import os\nos.system('true')",
        "import os\nos.fork()",
    ],
)
def test_network_and_processes_are_refused(program: str) -> None:
    result = run_python(program, FAST)
    assert result.status == "failed" and "sandbox:" in result.stderr


@pytest.mark.skipif(isolation() != "netns", reason="no network namespace on this machine")
def test_the_network_namespace_holds_even_past_the_audit_hook() -> None:
    # ctypes goes around the audit hook; the empty namespace must still refuse the connection.
    program = (
        "import ctypes, struct\n"
        "libc = ctypes.CDLL(None)\n"
        "fd = libc.socket(2, 1, 0)\n"
        "addr = struct.pack('!HH4s8x', 2, 53, bytes([1, 1, 1, 1]))\n"
        "addr = struct.pack('H', 2) + addr[2:]\n"
        "assert libc.connect(fd, addr, len(addr)) == 0, 'connect refused'\n"
    )
    result = run_python(program, FAST)
    assert result.status == "failed" and "connect refused" in result.stderr


def test_memory_and_file_size_are_limited() -> None:
    assert run_python("x = bytearray(1 << 30)", FAST).status == "failed"
    big_write = "open('f', 'wb').write(b'x' * (2 << 20))"
    assert run_python(big_write, FAST).status != "passed"


def test_the_program_runs_in_a_fresh_directory_without_the_environment() -> None:
    program = (
        "import os, sys\n"
        "assert sorted(os.listdir('.')) == ['bootstrap.py', 'program.py', 'stderr', 'stdout']\n"
        "assert 'PYTHONPATH' not in os.environ and 'HTTP_PROXY' not in os.environ\n"
        "assert not any('site-packages' in p for p in sys.path)\n"
    )
    assert run_python(program, FAST).passed
