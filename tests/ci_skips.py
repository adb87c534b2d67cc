"""In CI (``CI`` set to true/1/yes) a skipped test is a failed test.

A missing PostgreSQL, promtool, network namespace or engine would otherwise let the run pass
with its tests unexercised. Each skip is reported as a failure naming its reason, and so is a
module skipped at collection. tests/conftest.py takes these hooks; nothing here imports the
gateway, so a small test folder can take them too (tests/deploy/test_ci_skips.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pytest


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this run is CI's (``CI=true``, as CI services set it)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() in ("1", "true", "yes")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def fail_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Turn a skip into a failure (in CI) that says why it was skipped."""
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        report.outcome = "failed"
        report.longrepr = (
            f"skipped in CI, and a skip fails a CI run: {skip_reason(report)}\n"
            "(install what it needs: bash deploy/install.sh as root on Debian)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    fail_skip(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    fail_skip(outcome.get_result())  # type: ignore[attr-defined]
