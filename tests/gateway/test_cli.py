"""`plumbline …` as a user types it (`gateway/cli.py`): the reports read what a gateway on the
same config recorded; a bad config or window is a short error and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from gateway import cli
from gateway.config import load_config
from gateway.fake_upstream import FakeHandle
from tests.harness import running_gateway, wait_for


def write_config(folder: Path, base_url: str) -> Path:
    path = folder / "plumbline.toml"
    path.write_text(
        '[server]\nhealth_interval_s = 0\n\n[store]\nurl = "sqlite:///var/plumbline.db"\n\n'
        f'[[upstreams]]\nname = "api"\nkind = "openai"\nbase_url = "{base_url}"\nmodel = "m"\n\n'
        '[models.smol]\nupstreams = ["api"]\n\n[prices.api]\ninput = 1.0\noutput = 2.0\n'
    )
    return path


def plumbline(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def recorded(fake: FakeHandle, tmp_path: Path) -> Path:
    """A config whose store holds three requests a gateway on it served (one failed)."""
    path = write_config(tmp_path, fake.base_url)
    config = load_config(path)
    fake.script({}, {}, {"status": 400, "message": "nope"})
    with running_gateway(config, record=True) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        for _ in range(2):
            client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "hi"}]
            )
        app_store = tmp_path / "var" / "plumbline.db"
        wait_for(lambda: app_store.exists())
    return path


def test_report_cost_reads_what_the_gateway_recorded(recorded: Path) -> None:
    code, table = plumbline("report", "cost", "--config", str(recorded))
    assert code == 0 and "smol" in table and "api" in table
    code, out = plumbline("report", "cost", "--config", str(recorded), "--json")
    assert code == 0
    [row] = [r for r in json.loads(out)["rows"] if r["upstream"] == "api"]
    assert row["requests"] == 3 and row["completion_tokens"] == 32
    assert row["error_rate"] == pytest.approx(1 / 3)  # the upstream's 400 is its answer


def test_report_health_and_shadow_answer_in_each_format(recorded: Path) -> None:
    for command in ("health", "shadow"):
        for fmt in ("table", "csv", "json"):
            code, out = plumbline("report", command, "--config", str(recorded), "--format", fmt)
            assert code == 0, out
            if fmt == "json":
                json.loads(out)


def test_bad_window_and_bad_config_are_short_errors(recorded: Path, tmp_path: Path) -> None:
    code, out = plumbline("report", "cost", "--config", str(recorded), "--since", "soon")
    assert code == 2 and "Traceback" not in out
    broken = tmp_path / "broken.toml"
    broken.write_text('[[upstreams]]\nname = "x"\nkind = "nope"\n')
    code, out = plumbline("report", "health", "--config", str(broken))
    assert code == 2 and "config error" in out
    code, out = plumbline("check", "--config", str(recorded))
    assert code == 0 and "smol" in out
