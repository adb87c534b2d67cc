"""The ``plumbline bench`` command: options in, a live progress display, tables out.

With several targets, the first is the baseline: after the main table comes the comparison of
every other target with it (`compare`), also appended to ``compare_out`` (default: next to the
TSV, ``<name>.compare.tsv``; a ``.md`` path gets a Markdown table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from plumbline_kit.loadgen.compare import compare, compare_table, write_compare
from plumbline_kit.loadgen.report import table
from plumbline_kit.loadgen.runner import BenchConfig, run_bench
from plumbline_kit.loadgen.scrape import parse_server_metrics
from plumbline_kit.loadgen.shape import parse_concurrencies, parse_shape
from plumbline_kit.loadgen.stats import Row
from plumbline_kit.loadgen.target import Endpoint, Target, parse_target


def tripwire_first(
    targets: Sequence[Target], console: Console, max_wrong: int | None, timeout_s: float
) -> list[Target]:
    """The tripwire (evals/tripwire.py) on each target; those that fail are not benched (a
    collapsed or silent server's speed means nothing). ValueError when none passes."""
    import asyncio

    from gateway.extras import evals_missing

    missing = evals_missing("the tripwire before a bench")
    if missing is not None:
        raise ValueError(f"{missing}; or skip it with --no-tripwire")
    from evals.tripwire import Target as Asked
    from evals.tripwire import tripwire_at

    passed = []
    for t in targets:
        [report] = asyncio.run(
            tripwire_at(
                t.base_url,
                t.api_key or "unused",
                [Asked(t.label, t.model)],
                timeout_s=timeout_s,
                max_wrong=max_wrong,
            )
        ).values()
        said = "passed" if report.passed else f"FAILED, not benched: {report.why()}"
        console.print(f"tripwire {t.label}: {report.line()}: {said}", markup=False)
        if report.passed:
            passed.append(t)
    if not passed:
        raise ValueError("every target failed the tripwire: nothing to bench")
    return passed


def bench_main(
    target: Sequence[str],
    model: str,
    shape: Sequence[str] = ("router",),
    concurrency: str = "1,8,32",
    api_key_env: str | None = None,
    environ: Mapping[str, str] | None = None,
    prompts_per_slot: int = 8,
    warmup: int | None = None,
    tsv: str | None = "bench.tsv",
    seed: int | None = None,
    ignore_eos: bool = True,
    endpoint: Endpoint = "completions",
    tokenizer_url: str | None = None,
    timeout_s: float = 600.0,
    console: Console | None = None,
    rounds: int = 1,
    server_metrics: Sequence[str] = (),
    compare_out: str | None = None,
    min_ratio: float | None = 0.99,
    max_ttft_delta_ms: float | None = 1.0,
    tripwire: bool = True,
    tripwire_max_wrong: int | None = None,
) -> list[Row]:
    """The ``plumbline bench`` command: parse options, run with a live display, print the table.

    `api_key_env` names the variable holding the key; its value is looked up in `environ`
    (the CLI passes ``os.environ``).
    """
    key = (environ or {}).get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise ValueError(f"environment variable {api_key_env} is not set")
    targets = [parse_target(t, model, key) for t in target]
    console = console or Console()
    if tripwire:
        targets = tripwire_first(targets, console, tripwire_max_wrong, timeout_s)
    config = BenchConfig(
        targets=targets,
        shapes=[parse_shape(s) for s in shape],
        concurrencies=parse_concurrencies(concurrency),
        prompts_per_slot=prompts_per_slot,
        warmup=warmup,
        tsv=Path(tsv) if tsv else None,
        seed=seed,
        ignore_eos=ignore_eos,
        endpoint=endpoint,
        tokenizer_url=tokenizer_url,
        timeout_s=timeout_s,
        rounds=rounds,
        server_metrics=parse_server_metrics(server_metrics, [t.label for t in targets]),
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        rows = run_bench(config, progress)
    console.print(table(rows))
    for label in dict.fromkeys(row.target for row in rows if row.tokenizer == "approx"):
        console.print(f"[yellow]{label}: no tokenizer endpoint; token counts approximate")
    if len(targets) > 1:
        comparisons = compare(rows, targets[0].label, min_ratio, max_ttft_delta_ms)
        console.print(compare_table(comparisons))
        if rounds < 3:
            console.print("[yellow]fewer than 3 rounds: no interval, no verdict (use --rounds 4+)")
        out = Path(compare_out) if compare_out else None
        if out is None and tsv:
            out = Path(tsv).with_name(Path(tsv).stem + ".compare.tsv")
        if out is not None:
            write_compare(out, comparisons)
            console.print(f"comparison appended to {out}")
    return rows
