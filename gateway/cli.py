"""The `plumbline` command line (typer).

plumbline serve --config FILE          the gateway alone (--workers N: N processes, one port)
plumbline up --config FILE             start the local replicas, wait until healthy, serve
plumbline check --config FILE          validate a config and print its routes
plumbline eval run|report|tripwire|logits   the eval suite, through the gateway
plumbline report cost|health|shadow    reports from the record store (--since 24h,
                                       --format table|csv|json, or --csv or --json)
plumbline bench …                      load generator with the reference workload shapes
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gateway.config import Config, ConfigError, default_config_path, load_config

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


report_app = typer.Typer(no_args_is_help=True, help="Reports from the record store.")
deploy_app = typer.Typer(no_args_is_help=True, help="Launch engines from profiles.")


class _EvalGroup(TyperGroup):
    """`plumbline eval …`, loaded when it is called: the eval suite (evals.cli, with the
    `[evals]` extra's packages and the openai SDK) stays out of `plumbline serve`. Without the
    extra its commands are a usage error that says what to install."""

    def _suite(self) -> Any:
        from gateway.extras import evals_missing

        why = evals_missing("plumbline eval")
        if why is not None:
            typer.secho(why, fg=typer.colors.RED, err=True)
            raise typer.Exit(2)
        from evals.cli import app as suite

        return typer.main.get_group(suite)

    def list_commands(self, ctx: Any) -> list[str]:
        commands: list[str] = self._suite().list_commands(ctx)
        return commands

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self._suite().get_command(ctx, cmd_name)


eval_app = typer.Typer(
    cls=_EvalGroup, no_args_is_help=True, help="Evaluate targets through the gateway."
)


def _subcommands() -> None:
    app.add_typer(eval_app, name="eval")
    app.add_typer(report_app, name="report")
    app.add_typer(deploy_app, name="deploy")


SinceOption = Annotated[str, typer.Option(help="Window, e.g. 30m, 24h, 7d")]
FormatOption = Annotated[
    str | None, typer.Option("--format", "-f", help="table | csv | json (default: table)")
]
CsvFlag = Annotated[bool, typer.Option("--csv", help="Same as --format csv")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Same as --format json")]
FORMATS = ("table", "csv", "json")


def output_format(fmt: str | None, csv: bool, json: bool) -> str:
    """The one format that `--format`, `--csv` and `--json` name together (every report takes
    all three); naming two different ones is a usage error."""
    named = {f for f in (fmt, "csv" if csv else None, "json" if json else None) if f}
    if fmt is not None and fmt not in FORMATS:
        raise typer.BadParameter(
            f"{fmt!r} is not one of {', '.join(FORMATS)}", param_hint="--format"
        )
    if len(named) > 1:
        raise typer.BadParameter(
            f"asks for {' and '.join(sorted(named))} at once; pick one",
            param_hint="'--format / --csv / --json'",
        )
    return named.pop() if named else "table"


@report_app.command("cost")
def report_cost_cmd(
    config: ConfigOption = None,
    since: SinceOption = "24h",
    format: FormatOption = None,
    csv: CsvFlag = False,
    json: JsonFlag = False,
) -> None:
    """Per model and upstream: requests, tokens by kind, $/M tokens, API/node ratio, rates."""
    from gateway.reports.cost import report_cost

    _report(report_cost, config, since, output_format(format, csv, json))


@report_app.command("health")
def report_health_cmd(
    config: ConfigOption = None,
    since: SinceOption = "24h",
    format: FormatOption = None,
    csv: CsvFlag = False,
    json: JsonFlag = False,
) -> None:
    """Every upstream: traffic, failed calls, watchdog rates (truncation by the upstream and
    client-capped, leaks, degenerate, tool calls, provider, drift)."""
    from gateway.reports.health import report_health

    _report(report_health, config, since, output_format(format, csv, json))


@report_app.command("shadow")
def report_shadow_cmd(
    config: ConfigOption = None,
    since: SinceOption = "24h",
    format: FormatOption = None,
    csv: CsvFlag = False,
    json: JsonFlag = False,
) -> None:
    """Shadow traffic: agreement with the primary, tokens, latency and cost of the shadow."""
    from gateway.reports.shadow import report_shadow

    _report(report_shadow, config, since, output_format(format, csv, json))


def _report(fn: Any, config: Path | None, since: str, fmt: str) -> None:
    cfg = _load(config)
    try:
        typer.echo(fn(cfg, since, fmt))
    except ValueError as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


_subcommands()

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $PLUMBLINE_CONFIG or ./config.toml)"
    ),
]


def _load(path: Path | None) -> Config:
    try:
        return load_config(path or default_config_path())
    except ConfigError as e:
        typer.secho(f"config error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


def _serve(
    config: Config,
    host: str | None,
    port: int | None,
    path: Path | None = None,
    processes: Any = None,
) -> None:
    from deploy.launch import serve
    from gateway.config import listening
    from gateway.edge.app import create_app

    config = listening(config, host, port)
    serve(
        create_app(config, config_path=path, tune_gc=True, processes=processes),
        config.server.host,
        config.server.port,
        config.server,
        echo=typer.echo,
    )


def _serve_workers(config: Config, host: str, port: int, path: Path, workers: int) -> None:
    from deploy.launch import ServeError, serve_workers

    try:
        status = serve_workers(config, path, host, port, workers, echo=typer.echo)
    except ServeError as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    if status:
        typer.secho("plumbline: a worker failed to start", fg=typer.colors.RED, err=True)
        raise typer.Exit(status)


WorkersOption = Annotated[
    int | None, typer.Option(min=1, help="Override [server].workers (processes on one port)")
]


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Override [server].host")] = None,
    port: Annotated[int | None, typer.Option(help="Override [server].port")] = None,
    workers: WorkersOption = None,
) -> None:
    """Serve the gateway (upstreams must already be running)."""
    cfg = _load(config)
    n = workers or cfg.server.workers
    typer.echo(
        f"plumbline: serving {len(cfg.models)} model(s) on "
        f"http://{host or cfg.server.host}:{port or cfg.server.port}/v1"
        + (f" ({n} workers)" if n > 1 else "")
    )
    path = config or default_config_path()
    if n > 1:
        _serve_workers(cfg, host or cfg.server.host, port or cfg.server.port, path, n)
    else:
        _serve(cfg, host, port, path)


@app.command()
def up(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Override [server].host")] = None,
    port: Annotated[int | None, typer.Option(help="Override [server].port")] = None,
) -> None:
    """Start the local replicas the config describes, wait until healthy, then serve (one
    gateway process: it supervises the replicas)."""
    from deploy.launch import launch_local

    cfg = _load(config)
    if cfg.server.workers > 1:
        typer.secho(
            f"plumbline up serves one gateway process, which supervises the replicas it starts; "
            f"the config asks for [server] workers = {cfg.server.workers}. Set workers = 1 for "
            "`plumbline up`, or start the replicas apart and run `plumbline serve`.",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(2)
    with contextlib.ExitStack() as stack:
        # Turn SIGTERM into a clean exit so the replicas are stopped by the exit stack.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        engines = stack.enter_context(launch_local(cfg, echo=typer.echo))
        typer.echo(
            f"plumbline: gateway on http://{host or cfg.server.host}:{port or cfg.server.port}/v1"
        )
        _serve(cfg, host, port, config or default_config_path(), processes=engines)


@app.command()
def check(config: ConfigOption = None) -> None:
    """Validate a config file and print what it routes."""
    cfg = _load(config)
    for name, route in cfg.models.items():
        fallback = f" -> fallback {', '.join(route.fallback)}" if route.fallback else ""
        typer.echo(
            f"{name}: {route.policy} over {', '.join(route.upstreams)}{fallback}"
            f" (profile {route.profile or 'none'})"
        )


# The load generator ships in the plumbline-kit distribution (./kit), not in the gateway's wheel.
BENCH_NEEDS_KIT = (
    "plumbline bench needs the plumbline-kit package (the load generator, kept out of the"
    " gateway's wheel): pip install ./kit from a source checkout"
)

_BENCH_HELP = "\n\n".join(
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


@app.command(help=_BENCH_HELP)
def bench(
    target: Annotated[list[str], typer.Option("--target", help="[LABEL=]BASE_URL, repeatable")],
    model: Annotated[str, typer.Option(help="Model name at the target(s)")],
    shape: Annotated[
        list[str], typer.Option(help="router|promptopt|judge|short|rollout|IN/OUT|PREFIX+IN/OUT")
    ] = ["router"],  # noqa: B006
    concurrency: Annotated[str, typer.Option(help="Comma-separated sweep")] = "1,8,32",
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the target's key")
    ] = None,
    prompts_per_slot: int = 8,
    warmup: int | None = None,
    tsv: Annotated[str, typer.Option(help="TSV file rows are appended to")] = "bench.tsv",
    seed: int | None = None,
    ignore_eos: bool = True,
    endpoint: Annotated[str, typer.Option(help="completions | chat")] = "completions",
    tokenizer_url: str | None = None,
    timeout_s: float = 600.0,
    rounds: Annotated[
        int, typer.Option(help="Rounds per cell, targets interleaved (forward, then reversed)")
    ] = 1,
    server_metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--server-metrics",
            help="[LABEL=]URL of a vLLM /metrics, repeatable (a label's URLs are summed)",
        ),
    ] = None,
    compare_out: Annotated[
        str | None,
        typer.Option(help="Comparison file (default: <tsv>.compare.tsv; .md: Markdown)"),
    ] = None,
    min_ratio: Annotated[
        float | None, typer.Option(help="Goal: out tok/s at least this times the baseline's")
    ] = 0.99,
    max_ttft_delta_ms: Annotated[
        float | None, typer.Option(help="Goal: TTFT p50 at most this many ms over the baseline's")
    ] = 1.0,
    tripwire: Annotated[
        bool,
        typer.Option(help="Run the tripwire on each target first; one that fails is not benched"),
    ] = True,
    tripwire_max_wrong: Annotated[
        int | None,
        typer.Option(help="Wrong tripwire answers that fail a target (default: only collapse)"),
    ] = None,
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


@deploy_app.command("vllm")
def deploy_vllm_cmd(
    profile: Annotated[str, typer.Option(help="Profile name (built-in or from the config)")],
    gpus: Annotated[str, typer.Option(help="GPU indices, e.g. 0,1,2,3")],
    config: ConfigOption = None,
    model: Annotated[
        str | None, typer.Option(help="Weights for --model (default: profile.weights)")
    ] = None,
    served_model_name: str | None = None,
    tp: Annotated[int | None, typer.Option(help="GPUs per replica (default: profile)")] = None,
    allow_power_capped: Annotated[
        bool, typer.Option(help="Start even if power.limit < max")
    ] = False,
    base_port: int = 8401,
    host: str = "127.0.0.1",
    node: str | None = None,
    register: Annotated[Path | None, typer.Option(help="Append [[upstreams]] entries here")] = None,
    timeout_s: float = 1800.0,
    replicas_per_gpu: Annotated[
        int, typer.Option(min=1, help="Replicas sharing each GPU (or TP group)")
    ] = 1,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(help="Each replica's share of its GPUs' memory (default: 0.90 split)"),
    ] = None,
) -> None:
    """One vLLM replica per GPU (or TP group, or several sharing one) from a profile;
    health-wait, record kernels, register."""
    from deploy.gpu import GpuError
    from deploy.supervisor import EngineStartError
    from deploy.vllm import DeployError, deploy_vllm

    cfg = _load(config)
    try:
        deploy_vllm(
            profile=profile,
            gpus=gpus,
            model=model,
            served_model_name=served_model_name,
            tp=tp,
            allow_power_capped=allow_power_capped,
            base_port=base_port,
            host=host,
            node=node,
            register=register,
            config=cfg,
            timeout_s=timeout_s,
            replicas_per_gpu=replicas_per_gpu,
            gpu_memory_utilization=gpu_memory_utilization,
            echo=typer.echo,
        )
    except (DeployError, GpuError, EngineStartError) as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
