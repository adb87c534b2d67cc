"""`plumbline bench`: the load generator with the reference workload shapes."""

from __future__ import annotations

from typing import Annotated

import typer

BENCH_HELP = "\n\n".join(
    [
        "Load-test a gateway or any OpenAI-compatible URL with the reference workload shapes.",
        "Every (shape, concurrency) cell runs --rounds times per target, the targets back to back"
        " in each round, forward in odd rounds and reversed in even ones (A B, B A, A B, ...), so"
        " drift between runs minutes apart cannot pass for a difference between targets. Each"
        " round's row is appended to the TSV (column `round`).",
        "With several targets the first is the baseline (normally `direct`): after the main table"
        " comes, per cell and other target, the median over rounds of the per-round paired values"
        " (output tok/s ratio, TTFT p50 difference in ms) with their range (min-max) and, from 3"
        " rounds, a t-based 95% interval of the mean. The verdict against --min-ratio and"
        " --max-ttft-delta-ms is `met` only when the whole interval clears the goal, `missed` when"
        " it lies wholly on the wrong side (or the target had errors), else `unclear`: use 4 or"
        " more rounds. The comparison is appended to --compare-out.",
        "--server-metrics reads vLLM's Prometheus /metrics right before and right after each run's"
        " measured requests and adds vLLM's own means over them (TTFT, ITL, E2E, queue, prefill,"
        " decode; columns srv_*). Through a gateway, give the metrics URLs of the replicas it"
        " fronts (repeat the label to sum several), to tell the relay's cost from vLLM generating"
        " slower. A bare URL applies to every target. With them the comparison also gives the"
        " relay's own share, vLLM's change of speed between runs divided out: the tok/s ratio"
        " times the ratio of vLLM's mean E2E, and the added TTFT (the client's mean TTFT less"
        " vLLM's mean TTFT, target less baseline), judged against the same goals (relay verdict).",
    ]
)


Targets = Annotated[list[str], typer.Option("--target", help="[LABEL=]BASE_URL, repeatable")]
Model = Annotated[str, typer.Option(help="Model name at the target(s)")]
Shapes = Annotated[
    list[str], typer.Option(help="router|promptopt|judge|short|rollout|IN/OUT|PREFIX+IN/OUT")
]
Concurrency = Annotated[str, typer.Option(help="Comma-separated sweep")]
ApiKeyEnv = Annotated[str | None, typer.Option(help="Env var holding the target's key")]
Tsv = Annotated[str, typer.Option(help="TSV file rows are appended to")]
Endpoint = Annotated[str, typer.Option(help="completions | chat")]
Rounds = Annotated[
    int, typer.Option(help="Rounds per cell, targets interleaved (forward, then reversed)")
]
ServerMetrics = Annotated[
    list[str] | None,
    typer.Option(
        "--server-metrics",
        help="[LABEL=]URL of a vLLM /metrics, repeatable (a label's URLs are summed)",
    ),
]
CompareOut = Annotated[
    str | None,
    typer.Option(help="Comparison file (default: <tsv>.compare.tsv; .md: Markdown)"),
]
MinRatio = Annotated[
    float | None, typer.Option(help="Goal: out tok/s at least this times the baseline's")
]
MaxTtftDelta = Annotated[
    float | None, typer.Option(help="Goal: TTFT p50 at most this many ms over the baseline's")
]
Tripwire = Annotated[
    bool, typer.Option(help="Run the tripwire on each target first; one that fails is not benched")
]
TripwireMaxWrong = Annotated[
    int | None,
    typer.Option(help="Wrong tripwire answers that fail a target (default: only collapse)"),
]


# The load generator ships in the plumbline-kit distribution (./kit), not in the gateway's wheel.
BENCH_NEEDS_KIT = (
    "plumbline bench needs the plumbline-kit package (the load generator, kept out of the"
    " gateway's wheel): pip install ./kit from a source checkout"
)


def bench(
    target: Targets,
    model: Model,
    shape: Shapes = ["router"],  # noqa: B006
    concurrency: Concurrency = "1,8,32",
    api_key_env: ApiKeyEnv = None,
    prompts_per_slot: int = 8,
    warmup: int | None = None,
    tsv: Tsv = "bench.tsv",
    seed: int | None = None,
    ignore_eos: bool = True,
    endpoint: Endpoint = "completions",
    tokenizer_url: str | None = None,
    timeout_s: float = 600.0,
    rounds: Rounds = 1,
    server_metrics: ServerMetrics = None,
    compare_out: CompareOut = None,
    min_ratio: MinRatio = 0.99,
    max_ttft_delta_ms: MaxTtftDelta = 1.0,
    tripwire: Tripwire = True,
    tripwire_max_wrong: TripwireMaxWrong = None,
) -> None:
    """Load-test a gateway or any OpenAI-compatible URL with the reference workload shapes."""
    from gateway.config import environment

    try:
        from plumbline_kit.loadgen import bench_main
    except ImportError:
        typer.secho(BENCH_NEEDS_KIT, fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    try:
        bench_main(
            target=target,
            model=model,
            shape=shape,
            concurrency=concurrency,
            api_key_env=api_key_env,
            environ=environment(),
            prompts_per_slot=prompts_per_slot,
            warmup=warmup,
            tsv=tsv,
            seed=seed,
            ignore_eos=ignore_eos,
            endpoint=endpoint,  # type: ignore[arg-type]
            tokenizer_url=tokenizer_url,
            timeout_s=timeout_s,
            rounds=rounds,
            server_metrics=server_metrics or [],
            compare_out=compare_out,
            min_ratio=min_ratio,
            max_ttft_delta_ms=max_ttft_delta_ms,
            tripwire=tripwire,
            tripwire_max_wrong=tripwire_max_wrong,
        )
    except ValueError as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
