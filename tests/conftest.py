"""Session-wide fixtures: the real local stack (vLLM CPU + llama.cpp on SmolLM2) for slow tests.

In CI (``CI=true``) a skipped test fails the run (`tests.ci_skips`); in every test, product code
that runs SQL on a running event loop fails it (`tests.loop_sql`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from gateway.config import Config, load_config, parse_config
from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport
from tests.harness import free_port
from tests.loop_sql import no_sql_on_a_running_loop

# No timing assertions in tests: Hypothesis's per-example deadline fails a correct test on a
# loaded 2-core machine, so it is off everywhere.
settings.register_profile("plumbline", deadline=None)
settings.load_profile("plumbline")

ROOT = Path(__file__).resolve().parents[1]


def _with_free_ports(config: Config, root: Path) -> Config:
    data: dict[str, Any] = config.model_dump(exclude_none=True)
    for upstream in data["upstreams"]:
        if upstream.get("launch"):
            upstream["base_url"] = f"http://127.0.0.1:{free_port()}/v1"
    data["server"]["health_interval_s"] = 0
    return parse_config(data, root=root)


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Config]:
    """The repository's config.toml with its local replicas really running (on free ports)."""
    from deploy.launch import launch_local

    config = _with_free_ports(load_config(ROOT / "config.toml"), tmp_path_factory.mktemp("stack"))
    with launch_local(config, echo=lambda line: None):
        yield config


__all__ = ["no_sql_on_a_running_loop", "pytest_make_collect_report", "pytest_runtest_makereport"]
