"""`plumbline eval …`: run the suite through the gateway, report, tripwire, logit divergence."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import openai
import typer

from evals import runner
from evals.dataset import SCORERS
from evals.options import (
    ApiKey,
    BaseUrl,
    Datasets,
    Keep,
    KeepConfig,
    ReasoningGym,
    RunsDir,
    Targets,
    Tripwire,
    TripwireMaxWrong,
)
from evals.result import ItemResult

if TYPE_CHECKING:
    from evals.tripwire import TripwireReport
    from gateway.config import Config
    from gateway.ledger.store import Store

app = typer.Typer(no_args_is_help=True, help="Evaluate targets through the gateway.")

DEFAULT_URL = "http://127.0.0.1:8400/v1"
KEY_HINT = "give --api-key (or PLUMBLINE_API_KEY), or --config with [evals].lane_key_env set"


@app.command("run")
def run_cmd(
    target: Targets,
    suite: Annotated[str, typer.Option(help="default | smoke")] = "default",
    base_url: BaseUrl = DEFAULT_URL,
    seed: int = 0,
    concurrency: Annotated[int, typer.Option(min=1)] = 4,
    timeout: Annotated[float, typer.Option(help="Seconds per request")] = 1800.0,
    runs_dir: RunsDir = Path("var/evals"),
    resume: Annotated[str | None, typer.Option(help="Run id to resume")] = None,
    window: Annotated[int | None, typer.Option(help="Long-context window in tokens")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Cap per answer (default: none)")] = None,
    dataset: Datasets = None,
    reasoning_gym: ReasoningGym = 0,
    keep: Keep = False,
    config: KeepConfig = None,
    api_key: ApiKey = None,
    tripwire: Tripwire = True,
    tripwire_max_wrong: TripwireMaxWrong = None,
) -> None:
    """Run a suite (default | smoke | none) and/or user datasets; resumable with --resume.
    The tripwire goes first (--no-tripwire to skip): a target that fails it is not scored."""
    store = _store(config) if keep else None  # a store that cannot be opened fails first
    key = _key(api_key, config, keep)
    verdicts = (
        _tripwire_first(base_url, key, list(target), tripwire_max_wrong, timeout)
        if tripwire
        else {}
    )
    passed = [t for t in target if t not in verdicts or verdicts[t].passed]
    spec = runner.RunSpec(
        base_url=base_url,
        targets=passed,
        suite=suite,
        seed=seed,
        concurrency=concurrency,
        timeout_s=timeout,
        runs_dir=runs_dir,
        run_id=resume,
        window=window,
        max_tokens=max_tokens,
        datasets=_datasets(dataset or []),
        reasoning_gym=reasoning_gym,
        api_key=key,
        tripwire={t: r.to_dict() for t, r in verdicts.items()},
    )
    if not passed:
        _keep_tripwire(store, verdicts, resume or "unscored", "eval run")
        raise typer.BadParameter("every target failed the tripwire: nothing to score")
    try:
        results = _run(spec, store, verdicts)
    finally:
        if store is not None:
            store.close()
    _print_summary(results)


def _datasets(entries: list[str]) -> list[tuple[Path, str]]:
    """--dataset FILE:SCORER entries as (path, scorer)."""
    datasets = []
    for entry in entries:
        path, _, scorer = entry.rpartition(":")
        if not path or scorer not in SCORERS:
            raise typer.BadParameter(
                f"{entry!r}: expected FILE:SCORER with SCORER one of {', '.join(SCORERS)}"
            )
        datasets.append((Path(path), scorer))
    return datasets


def _run(
    spec: runner.RunSpec, store: Store | None, verdicts: dict[str, TripwireReport]
) -> list[ItemResult]:
    """The run, said as it ends (and kept in `store`, with the tripwire's verdicts)."""
    try:
        run_dir = runner.run(spec)
    except ValueError as e:  # what was asked cannot be run: said, not a traceback
        raise typer.BadParameter(str(e)) from None
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        raise typer.BadParameter(
            f"the gateway refused the key (HTTP {e.status_code}: {runner.said(e)}); {KEY_HINT}"
        ) from None
    meta, results = runner.load_run(run_dir)
    typer.echo(f"run {meta['run']}: {len(results)} results in {run_dir}")
    sandboxed = meta.get("sandbox") or {}  # runs from before the sandbox was reported lack it
    typer.echo(f"code sandbox: {sandboxed.get('refused') or sandboxed.get('isolation')}")
    if store is not None:
        store.write_eval_results([r.to_dict() for r in results], time.time())
        _keep_tripwire(store, verdicts, meta["run"], "eval run")
        typer.echo(f"kept in the store: eval report {meta['run']} --from-store")
    return results


def _tripwire(
    base_url: str, key: str, targets: list[str], **options: Any
) -> dict[str, TripwireReport]:
    """The tripwire on each target through the gateway's eval lane (`options`: tripwire_at's);
    a gateway that cannot be reached is the user's error, said plainly."""
    from evals.tripwire import Target, tripwire_at

    asked = [Target(t, t) for t in targets]
    try:
        return asyncio.run(tripwire_at(base_url, key, asked, headers=runner.LANE_HEADER, **options))
    except openai.APIConnectionError as e:
        raise typer.BadParameter(f"the gateway at {base_url} cannot be reached: {e}") from None


def _tripwire_first(
    base_url: str, key: str, targets: list[str], max_wrong: int | None, timeout: float
) -> dict[str, TripwireReport]:
    """The tripwire on each target, its verdict printed; a target that fails is named."""
    verdicts = _tripwire(base_url, key, targets, timeout_s=timeout, max_wrong=max_wrong)
    for t, report in verdicts.items():
        refused = [
            r.detail for r in report.results if r.detail.startswith(("HTTP 401", "HTTP 403"))
        ]
        if len(refused) == len(report.results):
            raise typer.BadParameter(f"the gateway refused the key ({refused[0]}); {KEY_HINT}")
        said = "passed" if report.passed else f"FAILED, not scored: {report.why()}"
        typer.echo(f"tripwire {t}: {report.line()}: {said}")
    return verdicts


def _keep_tripwire(
    store: Store | None, verdicts: dict[str, TripwireReport], run: str, source: str
) -> None:
    if store is None or not verdicts:
        return
    from gateway.ledger.rounds import keep_tripwires

    now = time.time()
    keep_tripwires(
        store.engine,
        [
            {
                "time": now,
                "target": t,
                "run": run,
                "source": source,
                "verdict": r.verdict,
                "passed": r.passed,
                "report": r.to_dict(),
            }
            for t, r in verdicts.items()
        ],
    )


def _print_summary(results: list[ItemResult]) -> None:
    from evals.stats import summarise

    by_target: dict[str, list[ItemResult]] = {}
    for r in results:
        by_target.setdefault(r.target, []).append(r)
    for target, rows in by_target.items():
        s = summarise(rows)
        typer.echo(f"  {target}: {s}")


@app.command("report")
def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders (or ids under --runs-dir)")],
    runs_dir: RunsDir = Path("var/evals"),
    out: Annotated[Path | None, typer.Option(help="Output folder")] = None,
    baseline: Annotated[str | None, typer.Option(help="Arm to compare the others against")] = None,
    from_store: Annotated[
        bool, typer.Option(help="Read the runs (ids) from the gateway's store: scheduled runs")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Gateway config: the store to read with --from-store, and the [nodes.NAME] "
            "costs that price self-hosted arms (default: $PLUMBLINE_CONFIG, else ./config.toml "
            "when present)"
        ),
    ] = None,
) -> None:
    """Markdown + HTML report with intervals, paired tests, noise floor, charts and details."""
    from evals.report import write_report

    folders = [r if r.exists() and not from_store else runs_dir / str(r) for r in runs]
    tripwire: dict[str, Any] = {}
    if from_store:
        results, tripwire = _stored_runs([str(r) for r in runs], config)
        if not results:
            raise typer.BadParameter(f"no results of {[str(r) for r in runs]} in the store")
    else:
        results = []
        for folder in folders:
            meta, items = runner.load_run(folder)
            results += items
            tripwire.update(meta.get("tripwire") or {})
    first = folders[0]
    target = out or first / "report"
    paths = write_report(
        results, target, baseline=baseline, config=_pricing_config(config), tripwire=tripwire
    )
    for kind, path in paths.items():
        typer.echo(f"{kind}: {path}")


def _pricing_config(config_path: Path | None) -> Config | None:
    """The gateway config that prices node arms: the one named, else $PLUMBLINE_CONFIG or
    ./config.toml when it exists; None when there is none (node arms' cost is then unknown)."""
    from gateway.config import ConfigError, default_config_path, load_config

    path = config_path or default_config_path()
    if config_path is None and not path.exists():
        return None
    try:
        return load_config(path)
    except (ConfigError, OSError) as e:
        raise typer.BadParameter(f"config {path}: {e}") from None


def _key(api_key: str | None, config_path: Path | None, keep: bool) -> str:
    """The key to present: the one given, else (with a config at hand: --config, or --keep's)
    the eval lane's credential its [evals].lane_key_env names, else none ("unused")."""
    if api_key:
        return api_key
    if config_path is None and not keep:
        return "unused"
    from gateway.config import ConfigError, default_config_path, load_config

    try:
        lane = load_config(config_path or default_config_path()).evals.lane_key()
    except (ConfigError, OSError) as e:
        raise typer.BadParameter(f"config: {e}") from None
    return lane or "unused"


def _store(config_path: Path | None) -> Store:
    from gateway.config import default_config_path, load_config
    from gateway.ledger.store import Store

    return Store.from_config(load_config(config_path or default_config_path()))


def _stored_runs(
    runs: list[str], config_path: Path | None
) -> tuple[list[ItemResult], dict[str, Any]]:
    """The runs' kept results, and the tripwire verdicts kept with them (by target)."""
    from gateway.ledger.rounds import tripwires_of

    store = _store(config_path)
    try:
        results = [ItemResult.from_dict(r) for r in store.eval_results(runs)]
        verdicts = {v["target"]: v["report"] for v in tripwires_of(store.engine, runs)}
        return results, verdicts
    finally:
        store.close()


@app.command("tripwire")
def tripwire_cmd(
    target: Targets,
    base_url: BaseUrl = DEFAULT_URL,
    max_tokens: int = 256,
    max_wrong: Annotated[
        int | None, typer.Option(help="Wrong answers a target may give and pass (default 2)")
    ] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables")] = False,
    api_key: ApiKey = None,
    config: Annotated[
        Path | None, typer.Option(help="Gateway config naming the eval lane's credential")
    ] = None,
) -> None:
    """20 fixed prompts per target, served per the target's profile: a table per target
    (prompt, verdict, why) and its verdict (ok / degenerate / wrong / error). Exits 1 when a
    target fails."""
    import json

    from evals.tripwire import table

    key = _key(api_key, config, False)
    reports = _tripwire(base_url, key, target, max_tokens=max_tokens, max_wrong=max_wrong)
    if as_json:
        typer.echo(json.dumps({t: r.to_dict() for t, r in reports.items()}, indent=2))
    else:
        for t, r in reports.items():
            typer.echo(table(t, r))
    if not all(r.passed for r in reports.values()):
        raise typer.Exit(1)


@app.command("logits")
def logits_cmd(
    a: Annotated[str, typer.Option(help="First target")],
    b: Annotated[str, typer.Option(help="Second target")],
    base_url: BaseUrl = DEFAULT_URL,
    mode: Annotated[
        str,
        typer.Option(
            help="echo: teacher-forced, every token of fixed texts (needs echo + logprobs, as "
            "vLLM serves them); greedy: generated tokens while both targets agree"
        ),
    ] = "echo",
    max_tokens: Annotated[int, typer.Option(help="Tokens per prompt (greedy mode)")] = 32,
) -> None:
    """Top-1 agreement and mean KL between two targets, against an a-vs-a control."""
    from evals.logits import TEXTS, against_control, collect, collect_echo, divergence
    from evals.tripwire import PROMPTS

    if mode not in ("echo", "greedy"):
        raise typer.BadParameter(f"--mode {mode!r}: expected echo or greedy")

    async def go() -> None:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="unused", default_headers=runner.LANE_HEADER
        )
        try:
            if mode == "echo":
                control = divergence(*await collect_echo((client, a), (client, a), TEXTS))
                treated = divergence(*await collect_echo((client, a), (client, b), TEXTS))
            else:
                prompts = [p.text for p in PROMPTS[:8]]
                control = divergence(
                    *await collect((client, a), (client, a), prompts, max_tokens=max_tokens)
                )
                treated = divergence(
                    *await collect((client, a), (client, b), prompts, max_tokens=max_tokens)
                )
        finally:
            await client.close()
        typer.echo(f"control {a} vs {a}: {control}")
        typer.echo(f"pair    {a} vs {b}: {treated}")
        typer.echo(f"verdict: {against_control(treated, control)}")

    try:
        asyncio.run(go())
    except (ValueError, openai.APIError) as e:
        raise typer.BadParameter(str(e)) from None
