"""`plumbline bench` without the plumbline-kit distribution: a clear message naming what to
install, and a non-zero exit (with the kit, tests/kit/loadgen runs it)."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from gateway import cli


def test_bench_without_the_kit_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail as if the kit were not installed.
    monkeypatch.setitem(sys.modules, "plumbline_kit.loadgen", None)
    result = CliRunner().invoke(
        cli.app,
        ["bench", "--target", "http://127.0.0.1:9/v1", "--model", "m"],
        env={"COLUMNS": "240"},
    )
    assert result.exit_code == 2
    assert "plumbline bench needs the plumbline-kit package" in result.output
    assert "pip install ./kit" in result.output
    assert not isinstance(result.exception, ImportError)
