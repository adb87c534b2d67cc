"""`plumbline …` as a user types it (`gateway/cli.py`): the reports read what a gateway on the
same config recorded; a bad config or window is a short error and exit status 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from gateway import cli
from gateway.config import load_config
from plumbline_kit.fakes.upstream import FakeHandle
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


REPORTS = ("cost", "health", "shadow")
SPELLINGS = {
    "table": [[], ["--format", "table"], ["-f", "table"]],
    "csv": [["--format", "csv"], ["-f", "csv"], ["--csv"]],
    "json": [["--format", "json"], ["-f", "json"], ["--json"]],
}


def test_every_report_takes_the_same_output_flags(recorded: Path) -> None:
    """`--format table|csv|json` (or `-f`), `--csv` and `--json` mean the same on every report,
    and each spelling of one format gives the same output."""
    for command in REPORTS:
        for fmt, spellings in SPELLINGS.items():
            outs = set()
            for flags in spellings:
                code, out = plumbline("report", command, "--config", str(recorded), *flags)
                assert code == 0, (command, flags, out)
                outs.add(_timeless(out) if fmt == "json" else out)
            assert len(outs) == 1, (command, fmt, outs)
            out = outs.pop()
            if fmt == "csv":
                assert "," in out.splitlines()[0]
            elif fmt == "table":
                assert "─" in out  # a rich table's rule


def _timeless(out: str) -> str:
    """A JSON report without its window's clock readings (each run reads the clock)."""
    doc = json.loads(out)
    for key in ("since", "until"):
        doc.pop(key, None)
    return json.dumps(doc, sort_keys=True)


def test_conflicting_or_unknown_formats_are_usage_errors(recorded: Path) -> None:
    for command in REPORTS:
        for flags in (["--csv", "--json"], ["--format", "table", "--json"], ["--format", "xml"]):
            code, out = plumbline("report", command, "--config", str(recorded), *flags)
            assert code == 2 and "Traceback" not in out, (command, flags, out)
    code, out = plumbline("report", "health", "--config", str(recorded), "--json", "-f", "json")
    assert code == 0  # the same format twice is no conflict


def test_report_health_names_a_dead_and_an_idle_upstream(fake: FakeHandle, tmp_path: Path) -> None:
    """A route whose first upstream refuses connections falls back to a live one: the dead one
    served nothing, but `report health` lists it as failing (and an unused one as idle)."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    port = dead.getsockname()[1]
    path = tmp_path / "plumbline.toml"
    path.write_text(
        '[server]\nhealth_interval_s = 0\nretries = 0\n\n[store]\nurl = "sqlite:///var/p.db"\n\n'
        f'[[upstreams]]\nname = "dead"\nkind = "vllm"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'model = "m"\n\n'
        f'[[upstreams]]\nname = "live"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
        'model = "m"\n\n'
        f'[[upstreams]]\nname = "idle"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
        'model = "m"\n\n'
        '[models.smol]\nupstreams = ["dead"]\nfallback = ["live"]\n\n'
        '[models.spare]\nupstreams = ["idle"]\n'
    )
    try:
        with running_gateway(load_config(path), record=True) as url:
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            for _ in range(3):
                client.chat.completions.create(
                    model="smol", messages=[{"role": "user", "content": "hi"}]
                )
    finally:
        dead.close()
    code, out = plumbline("report", "health", "--config", str(path), "--json")
    assert code == 0, out
    by = {r["upstream"]: r for r in json.loads(out)["rows"]}
    assert list(by) == ["dead", "live", "idle"]
    assert by["dead"]["requests"] == 0 and by["dead"]["failed_attempts"] >= 3
    assert by["dead"]["state"] == "failing"
    assert by["live"]["requests"] == 3 and by["live"]["state"] == "ok"
    assert by["idle"]["requests"] == 0 and by["idle"]["state"] == "no traffic"
    code, table = plumbline("report", "health", "--config", str(path))
    assert code == 0 and "failing" in table and "no traffic" in table


def test_bad_window_and_bad_config_are_short_errors(recorded: Path, tmp_path: Path) -> None:
    code, out = plumbline("report", "cost", "--config", str(recorded), "--since", "soon")
    assert code == 2 and "Traceback" not in out
    broken = tmp_path / "broken.toml"
    broken.write_text('[[upstreams]]\nname = "x"\nkind = "nope"\n')
    code, out = plumbline("report", "health", "--config", str(broken))
    assert code == 2 and "config error" in out
    code, out = plumbline("check", "--config", str(recorded))
    assert code == 0 and "smol" in out
