"""`plumbline serve`, `plumbline up` and `plumbline check`: the gateway, alone or with the
local replicas it starts, and a config's routes."""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.cli.common import ConfigOption, load
from gateway.config import Config, default_config_path


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
        create_app(config, config_path=path, tune_process=True, processes=processes),
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


def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Override [server].host")] = None,
    port: Annotated[int | None, typer.Option(help="Override [server].port")] = None,
    workers: WorkersOption = None,
) -> None:
    """Serve the gateway (upstreams must already be running)."""
    cfg = load(config)
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


def up(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Override [server].host")] = None,
    port: Annotated[int | None, typer.Option(help="Override [server].port")] = None,
) -> None:
    """Start the local replicas the config describes, wait until healthy, then serve (one
    gateway process: it supervises the replicas)."""
    from deploy.launch import launch_local

    cfg = load(config)
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


def check(config: ConfigOption = None) -> None:
    """Validate a config file and print what it routes."""
    cfg = load(config)
    for name, route in cfg.models.items():
        fallback = f" -> fallback {', '.join(route.fallback)}" if route.fallback else ""
        typer.echo(
            f"{name}: {route.policy} over {', '.join(route.upstreams)}{fallback}"
            f" (profile {route.profile or 'none'})"
        )
