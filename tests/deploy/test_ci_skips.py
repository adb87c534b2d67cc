"""In CI a skipped test fails the run (tests/conftest.py); elsewhere a skip stays a skip.

Each case runs a real pytest in a subprocess on a small test folder whose conftest takes the
repository's hooks, with and without ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci_skips import in_ci

ROOT = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

def test_passes():
    assert True

@pytest.mark.skipif(True, reason="promtool not installed")
def test_needs_promtool():
    pass

def test_needs_postgres():
    pytest.skip("PostgreSQL server binaries absent")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (folder / "conftest.py").write_text(
        "from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "test_some.py").write_text(TESTS)
    return tmp_path


def test_outside_ci_a_skip_is_a_skip(folder: Path) -> None:
    done = run_pytest(folder, None)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in done.stdout


def test_in_ci_every_skip_fails_the_run_and_says_why(folder: Path) -> None:
    done = run_pytest(folder, "true")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in done.stdout  # skipif: at setup
    assert "skipped in CI, and a skip fails a CI run: promtool not installed" in done.stdout
    assert "skipped in CI, and a skip fails a CI run: PostgreSQL server binaries absent" in (
        done.stdout
    )


def test_in_ci_a_module_skipped_at_collection_fails_too(tmp_path: Path) -> None:
    (tmp_path / "test_engine.py").write_text(
        'import pytest\npytest.importorskip("no_such_engine_module")\n\n'
        "def test_never_collected():\n    pass\n"
    )
    assert run_pytest(tmp_path, None).returncode == 5  # nothing ran: only a skip
    done = run_pytest(tmp_path, "true")
    assert done.returncode != 0 and done.returncode != 5, done.stdout
    assert "skipped in CI" in done.stdout and "no_such_engine_module" in done.stdout


def test_what_counts_as_ci() -> None:
    assert in_ci({"CI": "true"}) and in_ci({"CI": "1"}) and in_ci({"CI": "True"})
    assert not in_ci({}) and not in_ci({"CI": ""}) and not in_ci({"CI": "false"})
