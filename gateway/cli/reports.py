"""`plumbline report cost|health|shadow`: reports from the record store (--since 24h,
--format table|csv|json, or --csv or --json)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.cli.common import ConfigOption, load

report_app = typer.Typer(no_args_is_help=True, help="Reports from the record store.")

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
    lane: Annotated[
        str, typer.Option(help="client (default) | eval | shadow | all (each lane its own rows)")
    ] = "client",
) -> None:
    """Per model and upstream: requests, tokens by kind, $/M tokens, API/node ratio, rates."""
    from gateway.reports.cost import report_cost

    _report(
        functools.partial(report_cost, lane=lane), config, since, output_format(format, csv, json)
    )


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
    cfg = load(config)
    try:
        typer.echo(fn(cfg, since, fmt))
    except ValueError as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
