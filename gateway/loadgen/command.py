"""The ``plumbline bench`` command: options in, a live progress display, a table out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gateway.loadgen.report import table
from gateway.loadgen.runner import BenchConfig, run_bench
from gateway.loadgen.shape import parse_concurrencies, parse_shape
from gateway.loadgen.stats import Row
from gateway.loadgen.target import Endpoint, parse_target


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
) -> list[Row]:
    """The ``plumbline bench`` command: parse options, run with a live display, print the table.

    `api_key_env` names the variable holding the key; its value is looked up in `environ`
    (the CLI passes ``os.environ``).
    """
    key = (environ or {}).get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise ValueError(f"environment variable {api_key_env} is not set")
    config = BenchConfig(
        targets=[parse_target(t, model, key) for t in target],
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
    )
    console = console or Console()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        rows = run_bench(config, progress)
    console.print(table(rows))
    for row in rows:
        if row.tokenizer == "approx":
            console.print(f"[yellow]{row.target}: no tokenizer endpoint; token counts approximate")
    return rows
