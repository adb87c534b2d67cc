"""The runner end to end: items -> gateway -> (fake | real) upstream -> scored results -> report."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from evals import runner, sandbox
from evals.report import write_report
from evals.stats import by_family, summarise
from evals.suite import SUITES
from plumbline_kit.fakes.upstream import running_fake
from tests.harness import config_from, running_gateway, wait_for

SMOKE_ITEMS = sum(n or 0 for n in SUITES["smoke"].values())


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
    assert {r.family for r in results} == set(SUITES["smoke"])
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


def test_items_are_built_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduled round runs in the gateway's process, on the loop its requests use: building
    the suite's items there held that loop over a second (the math family's checks)."""
    threads: list[str] = []
    real = runner.build_items

    def built(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(runner, "build_items", built)
    with running_fake(tokens=6) as fake, running_gateway(gateway_for(ok=fake.base_url)) as url:
        runner.run(spec(url, ["ok"], tmp_path, run_id="r1"), show_progress=False)
    assert threads and threads[0] != threading.main_thread().name  # the loop ran in main


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


def _dataset(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "sums.jsonl"
    path.write_text(
        "".join(f'{{"id": "s{i}", "question": "{i}+0?", "answer": {i}}}\n' for i in range(n))
    )
    return path


def _dataset_spec(url: str, targets: list[str], tmp_path: Path, **kw: Any) -> runner.RunSpec:
    return runner.RunSpec(
        base_url=url,
        targets=targets,
        suite="none",
        runs_dir=tmp_path,
        timeout_s=20,
        datasets=[(_dataset(tmp_path), "math_integer")],
        retry_wait_s=0,
        **kw,
    )


def test_errors_have_their_own_fields_and_scorer_detail_is_kept(tmp_path: Path) -> None:
    """An upstream that fails (503, every retry) and one that refuses the request (400): each
    item's outcome is `error` with its class and message in `error_class` / `error`, and no
    finish reason (the upstream gave none). An answered item keeps the upstream's finish reason
    and its scorer's detail, and the report counts the errors by class."""
    with (
        running_fake(status=503, message="overloaded") as down,
        running_fake(status=400, message="bad prompt") as refuses,
        running_fake(text="ANSWER: two") as words,
    ):
        cfg = gateway_for(down=down.base_url, refuses=refuses.base_url, words=words.base_url)
        with running_gateway(cfg) as url:
            path = runner.run(
                _dataset_spec(url, ["down", "refuses", "words"], tmp_path, run_id="e"),
                show_progress=False,
            )
    _, results = runner.load_run(path)
    by = {t: [r for r in results if r.target == t] for t in ("down", "refuses", "words")}
    assert all(len(rs) == 3 for rs in by.values())
    for r in by["down"]:
        assert (r.outcome, r.finish_reason) == ("error", None)
        assert r.error_class is not None and r.error_class.startswith("http_5"), r
        assert r.error and r.error.startswith("HTTP 5")
    for r in by["refuses"]:
        assert (r.outcome, r.finish_reason, r.error_class) == ("error", None, "http_400")
    for r in by["words"]:
        assert (r.outcome, r.finish_reason, r.error) == ("unparsed", "stop", None)
        assert r.detail == "not a value: 'two' (reads as unknowns o, t, w)"
        assert r.upstream == "words" and r.started is not None and r.prompt_tokens
    paths = write_report(results, tmp_path / "report")
    details = paths["details"].read_text()
    assert "not a value: 'two'" in details and "http_400" in details
    errors = paths["markdown"].read_text().split("## Errors and timeouts")[1]
    assert "| refuses | 3 | 3 | http_400 3 | 0 | 0 |" in errors


def test_a_self_hosted_arm_is_priced_by_its_node_hours(tmp_path: Path) -> None:
    """A node upstream's answers carry no per-request cost; with the gateway config the report
    prices them from [nodes.NAME] over the hours the run kept the node busy, and puts the arm on
    the frontier; without the config its cost is unknown, never $0."""
    with running_fake(text="ANSWER: 2", cost=0.0) as api, running_fake(text="ANSWER: 1") as gpu:
        cfg = config_from(
            {
                "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
                "nodes": {"box": {"cost_per_hour": 36.0, "utilisation": 0.5}},
                "prices": {"api": {"input": 1.0, "output": 4.0}},
                "upstreams": [
                    {"name": "api", "kind": "openai", "base_url": api.base_url, "model": "m"},
                    {
                        "name": "gpu",
                        "kind": "vllm",
                        "base_url": gpu.base_url,
                        "model": "fake-model",
                        "profile": "smollm2",
                        "node": "box",
                    },
                ],
                "models": {
                    "api": {"upstreams": ["api"]},
                    "gpu": {"profile": "smollm2", "upstreams": ["gpu"]},
                },
            }
        )
        with running_gateway(cfg) as url:
            path = runner.run(
                _dataset_spec(url, ["api", "gpu"], tmp_path, run_id="c"), show_progress=False
            )
    _, results = runner.load_run(path)
    gpu_items = [r for r in results if r.target == "gpu"]
    assert all(r.cost is None and r.upstream == "gpu" for r in gpu_items)
    assert all(r.cost and r.cost_basis == "price" for r in results if r.target == "api")
    unpriced = write_report(results, tmp_path / "a")
    assert "cost unknown for gpu" in unpriced["markdown"].read_text()
    priced = write_report(results, tmp_path / "b", config=cfg)
    table = priced["markdown"].read_text().split("## Quality against cost")[1]
    [gpu_row] = [line for line in table.splitlines() if line.startswith("| gpu |")]
    assert "| 3/3 | node-hours |" in gpu_row and "unknown" not in gpu_row
    assert "frontier" in priced
    # The node's share: its busy hours (at most the items' summed latency) at $72 per hour.
    total = float(gpu_row.split(" | ")[2])
    assert 0 < total <= sum(r.latency_s or 0 for r in gpu_items) / 3600 * 72 + 1e-4


def test_code_items_are_refused_not_scored_without_a_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the probe finds no isolation mechanism, every item that would run code is an
    `error` of class `sandbox_refused` (neither right nor wrong), and the run's metadata says
    why; with the mechanism, the metadata names it."""
    none = sandbox.probe.Mechanism(landlock_abi=0, seccomp=False, netns_prefix=())
    monkeypatch.setattr(sandbox.probe, "chosen", lambda: none)
    sandbox._smoke_failure.cache_clear()
    answer = "def f(x): return x"  # the fake answers with the words of its text
    try:
        with (
            running_fake(text=answer) as fake,
            running_gateway(gateway_for(ok=fake.base_url)) as url,
        ):
            path = runner.run(spec(url, ["ok"], tmp_path, run_id="refused"), show_progress=False)
    finally:
        monkeypatch.undo()
        sandbox._smoke_failure.cache_clear()
    meta, results = runner.load_run(path)
    code = [r for r in results if r.family == "code"]
    assert code and {(r.outcome, r.error_class) for r in code} == {("error", "sandbox_refused")}
    assert all(r.error and "no Landlock" in r.error for r in code)
    assert meta["sandbox"]["isolation"] == "refused"
    assert "no Landlock" in meta["sandbox"]["refused"]
    assert sandbox.describe() == {"isolation": sandbox.isolation(), "refused": None}
