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

import typer

from gateway.cli.engines import deploy_app
from gateway.cli.load import BENCH_HELP, bench
from gateway.cli.reports import report_app
from gateway.cli.serving import check, serve, up
from gateway.cli.suite import eval_app

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(eval_app, name="eval")
app.add_typer(report_app, name="report")
app.add_typer(deploy_app, name="deploy")
app.command()(serve)
app.command()(up)
app.command()(check)
app.command(help=BENCH_HELP)(bench)
