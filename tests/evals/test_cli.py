"""`plumbline eval …` as a user runs it: a run by hand kept in the store and reported from it."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from evals.runner import load_run
from evals.sandbox import isolation
from gateway import cli
from plumbline_kit.fakes.upstream import running_fake
from tests.evals.test_dataset import write
from tests.evals.test_runner import gateway_for
from tests.harness import running_gateway


def test_a_run_by_hand_is_kept_in_the_store_with_keep(tmp_path: Path) -> None:
    """`eval run --keep` writes the results to the gateway's store as well as the runs folder;
    after the folder is gone, `eval report --from-store` still builds the report."""
    data = write(
        tmp_path / "mine.jsonl", *({"id": i, "question": f"{i}+0?", "answer": i} for i in range(4))
    )
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/plumbline.db"\n')
    runs = tmp_path / "runs"
    with (
        running_fake(text="ANSWER: 2") as fake,
        running_gateway(gateway_for(ok=fake.base_url)) as url,
    ):
        args = ["eval", "run", "-t", "ok", "--suite", "none", "--base-url", url]
        args += ["--dataset", f"{data}:math_integer", "--runs-dir", str(runs), "--timeout", "20"]
        ran = CliRunner().invoke(cli.app, [*args, "--keep", "--config", str(config)])
    assert ran.exit_code == 0, ran.output
    [folder] = [p for p in runs.iterdir() if p.is_dir()]
    assert f"eval report {folder.name} --from-store" in ran.output
    assert f"code sandbox: {isolation()}" in ran.output  # what code items ran under
    shutil.rmtree(folder)
    out = tmp_path / "report"
    report = ["eval", "report", folder.name, "--from-store", "--config", str(config)]
    reported = CliRunner().invoke(cli.app, [*report, "--out", str(out)])
    assert reported.exit_code == 0, reported.output
    assert "ok" in (out / "report.md").read_text()


def test_keep_with_a_store_that_cannot_be_opened_fails_before_running(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[store]\nurl = "postgresql://nobody@127.0.0.1:1/none"\n')
    args = ["eval", "run", "-t", "ok", "--suite", "smoke", "--base-url", "http://127.0.0.1:1/v1"]
    args += ["--runs-dir", str(tmp_path / "runs")]
    ran = CliRunner().invoke(cli.app, [*args, "--keep", "--config", str(config)])
    assert ran.exit_code != 0
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_a_reasoning_gym_slice_larger_than_the_math_items_is_refused(tmp_path: Path) -> None:
    with (
        running_fake(text="ANSWER: 2") as fake,
        running_gateway(gateway_for(ok=fake.base_url)) as url,
    ):
        args = ["eval", "run", "-t", "ok", "--suite", "smoke", "--base-url", url]
        ran = CliRunner().invoke(
            cli.app, [*args, "--runs-dir", str(tmp_path), "--reasoning-gym", "4"]
        )
    assert ran.exit_code == 2
    assert "the 'smoke' suite has 3 math items" in ran.output


def test_a_reasoning_gym_slice_is_asked_through_the_gateway(tmp_path: Path) -> None:
    """`--reasoning-gym 2`: two of the smoke suite's three math items come from reasoning-gym's
    generators, and the run says so."""
    with (
        running_fake(text="ANSWER: 2") as fake,
        running_gateway(gateway_for(ok=fake.base_url)) as url,
    ):
        args = ["eval", "run", "-t", "ok", "--suite", "smoke", "--base-url", url]
        args += ["--runs-dir", str(tmp_path), "--reasoning-gym", "2", "--timeout", "20"]
        ran = CliRunner().invoke(cli.app, args)
    assert ran.exit_code == 0, ran.output
    [folder] = [p for p in tmp_path.iterdir() if p.is_dir()]
    meta, results = load_run(folder)
    math = sorted(r.item_id for r in results if r.family == "math")
    assert meta["reasoning_gym"] == 2 and len(math) == 3
    assert [("-rg-" in i) for i in math] == [False, True, True]


def test_tripwire_and_logits_commands_through_the_gateway() -> None:
    """`eval tripwire` reads each target's 20 fixed prompts; `eval logits` compares two targets
    against an a-vs-a control. Only the shape of what they print is the fake's to decide."""
    with running_fake(tokens=4) as fake, running_gateway(gateway_for(ok=fake.base_url)) as url:
        code_t = CliRunner().invoke(cli.app, ["eval", "tripwire", "-t", "ok", "--base-url", url])
        args = ["eval", "logits", "--a", "ok", "--b", "ok", "--base-url", url]
        code_l = CliRunner().invoke(cli.app, [*args, "--mode", "greedy", "--max-tokens", "4"])
    # The fake answers "tok0 tok1 …": wrong, so the target fails (exit status 1), in a table.
    assert code_t.exit_code == 1, code_t.output
    assert "TripwireReport(" not in code_t.output and "What is 12 + 30?" in code_t.output
    assert "ok: FAILED: 19 of 20 prompts wrong (at most 2 allowed)" in code_t.output
    assert code_l.exit_code == 0, code_l.output
    lines = code_l.output.splitlines()
    assert [line.split()[0] for line in lines] == ["control", "pair", "verdict:"]


def test_logits_scores_every_token_of_fixed_texts_not_one_per_prompt() -> None:
    """An instruct model fed a bare prompt ends its answer at once (here: one token), so greedy
    comparison had one position per prompt; `eval logits` scores fixed texts teacher-forced,
    every token of each a position."""
    from evals.logits import TEXTS

    with running_fake(tokens=1) as fake, running_gateway(gateway_for(ok=fake.base_url)) as url:
        args = ["eval", "logits", "--a", "ok", "--b", "ok", "--base-url", url]
        ran = CliRunner().invoke(cli.app, args)
    assert ran.exit_code == 0, ran.output
    positions = sum(len(t.split()) - 1 for t in TEXTS)
    assert f"positions={positions}," in ran.output.splitlines()[0]
    assert positions > 10 * len(TEXTS)


def test_eval_tripwire_json_and_eval_run_skips_a_target_that_fails_it(tmp_path: Path) -> None:
    """`eval run` starts with the tripwire: a collapsed target is not scored, the verdicts are
    in run.json and in the report; `eval tripwire --json` is the same verdicts as JSON."""
    import json

    runs = tmp_path / "runs"
    with (
        running_fake(tokens=4) as fake,
        running_fake(degenerate=True, tokens=12) as broken,
        running_gateway(gateway_for(ok=fake.base_url, broken=broken.base_url)) as url,
    ):
        asked = ["eval", "tripwire", "-t", "ok", "-t", "broken", "--base-url", url, "--json"]
        tripwire = CliRunner().invoke(cli.app, asked)
        args = ["eval", "run", "-t", "ok", "-t", "broken", "--suite", "smoke", "--base-url", url]
        ran = CliRunner().invoke(cli.app, [*args, "--runs-dir", str(runs), "--timeout", "20"])
        skipped = CliRunner().invoke(
            cli.app, [*args, "--runs-dir", str(tmp_path / "all"), "--no-tripwire"]
        )
    doc = json.loads(tripwire.output)
    assert tripwire.exit_code == 1
    assert doc["broken"]["verdict"] == "degenerate" and doc["ok"]["verdict"] == "wrong"
    assert len(doc["broken"]["prompts"]) == 20
    assert ran.exit_code == 0, ran.output
    assert "tripwire broken: degenerate" in ran.output and "FAILED, not scored" in ran.output
    [folder] = [p for p in runs.iterdir() if p.is_dir()]
    meta, results = load_run(folder)
    assert {r.target for r in results} == {"ok"} and meta["targets"] == ["ok"]
    assert meta["tripwire"]["broken"]["passed"] is False
    assert meta["tripwire"]["ok"]["passed"] is True  # wrong answers alone do not fail a run
    reported = CliRunner().invoke(cli.app, ["eval", "report", str(folder)])
    assert reported.exit_code == 0, reported.output
    md = (folder / "report" / "report.md").read_text()
    assert "## Tripwire before scoring" in md and "no: not scored" in md
    assert skipped.exit_code == 0, skipped.output
    [every] = [p for p in (tmp_path / "all").iterdir() if p.is_dir()]
    assert {r.target for r in load_run(every)[1]} == {"ok", "broken"}
