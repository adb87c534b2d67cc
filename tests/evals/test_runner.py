"""The runner end to end: items -> gateway -> (fake | real) upstream -> scored results -> report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from evals import runner
from evals.report import write_report
from evals.stats import by_family, summarise
from gateway.fake_upstream import running_fake
from tests.harness import config_from, running_gateway, wait_for

SMOKE_ITEMS = sum(n or 0 for n in runner.SUITES["smoke"].values())


def gateway_for(probe_s: float = 0, **fakes: str) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": probe_s, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": name,
                    "kind": "vllm",
                    "base_url": url,
                    "model": "fake-model",
                    "profile": "smollm2",
                }
                for name, url in fakes.items()
            ],
            "models": {name: {"profile": "smollm2", "upstreams": [name]} for name in fakes},
        }
    )


def spec(url: str, targets: list[str], tmp_path: Path, **kw: Any) -> runner.RunSpec:
    return runner.RunSpec(
        base_url=url,
        targets=targets,
        suite="smoke",
        runs_dir=tmp_path,
        concurrency=4,
        timeout_s=20,
        **kw,
    )


def test_smoke_run_scores_every_item_and_resumes(tmp_path: Path) -> None:
    with running_fake(tokens=6) as fake, running_gateway(gateway_for(0.2, ok=fake.base_url)) as url:
        health = url.removesuffix("/v1") + "/health"
        wait_for(lambda: httpx.get(health).json()["upstreams"]["ok"]["engine"] is not None)
        path = runner.run(spec(url, ["ok"], tmp_path, run_id="r1"), show_progress=False)
        sent = len(fake.requests())
        meta, results = runner.load_run(path)
        # Resuming a finished run sends nothing and keeps the same results.
        runner.run(spec(url, ["ok"], tmp_path, run_id="r1"), show_progress=False)
        assert len(fake.requests()) == sent
        body = fake.requests()[0]["body"]
    assert len(results) == SMOKE_ITEMS == meta["items"] == sent
    assert {r.family for r in results} == set(runner.SUITES["smoke"])
    assert all(r.params_hash for r in results)  # the gateway's hash, per item
    # "tok0 tok1 …" answers nothing (it may happen to obey a format instruction, e.g. lowercase)
    assert not any(r.correct for r in results if r.family != "ifeval")
    assert meta["fingerprints"]["ok"]["upstream"] == ["ok"]
    # The serving stack the gateway fingerprinted, on every item and in the run's metadata.
    [engine] = meta["fingerprints"]["ok"]["engine"]
    assert engine.startswith("vllm 0.0.0-fake template ")
    assert {r.engine for r in results} == {engine}
    assert "max_tokens" not in body  # no cap by default
    assert body["temperature"] == 0.2  # served per the target's profile


def test_planted_faults_are_caught_by_the_report(tmp_path: Path) -> None:
    with (
        running_fake(tokens=4, finish_reason="length") as trunc,
        running_fake(tokens=4, leak_think=True) as leak,
        running_fake(degenerate=True, tokens=60) as degen,
        running_fake(hang_before_first_byte=5) as slow,
    ):
        cfg = gateway_for(
            trunc=trunc.base_url, leak=leak.base_url, degen=degen.base_url, slow=slow.base_url
        )
        with running_gateway(cfg) as url:
            run = spec(url, ["trunc", "leak", "degen", "slow"], tmp_path, run_id="faults")
            run.timeout_s = 1.0
            path = runner.run(run, show_progress=False)
    _, results = runner.load_run(path)
    arm = {
        t: summarise([r for r in results if r.target == t])
        for t in ("trunc", "leak", "degen", "slow")
    }
    assert all(s.n == SMOKE_ITEMS for s in arm.values())  # nothing dropped, timeouts included
    assert arm["trunc"].rates["truncated"] == 1.0
    assert arm["leak"].reasoning_leak_rate == 1.0
    assert arm["degen"].rates["degenerate"] == 1.0
    assert arm["slow"].rates["timeout"] == 1.0 and arm["slow"].accuracy == 0.0
    paths = write_report(results, tmp_path / "report")
    text = paths["markdown"].read_text()
    assert "reasoning leaks" in text and "100.0%" in text
    assert paths["chart"].stat().st_size > 0


@pytest.mark.slow
def test_smoke_suite_on_the_real_local_stack(local_stack: Any, tmp_path: Path) -> None:
    """The whole suite, reduced, through the gateway against SmolLM2 on vLLM and llama.cpp.
    CI caps answers at 256 tokens to fit its budget; truncations are counted, not hidden."""
    with running_gateway(local_stack) as url:
        run = spec(url, ["smollm2", "smollm2-llamacpp"], tmp_path, run_id="local", max_tokens=256)
        run.timeout_s = 600
        path = runner.run(run, show_progress=False)
    meta, results = runner.load_run(path)
    assert len(results) == 2 * SMOKE_ITEMS
    assert meta["window"] == 8192
    assert not [r for r in results if r.outcome == "error"]
    for target in ("smollm2", "smollm2-llamacpp"):
        families = by_family([r for r in results if r.target == target])
        assert families["overall"].n == SMOKE_ITEMS
    paths = write_report(results, tmp_path / "report")
    assert "Accuracy by family" in paths["markdown"].read_text()
