"""What every `plumbline` command shares: the `--config` option and loading the config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway.config import Config, ConfigError, default_config_path, load_config

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $PLUMBLINE_CONFIG or ./config.toml)"
    ),
]


def load(path: Path | None) -> Config:
    try:
        return load_config(path or default_config_path())
    except ConfigError as e:
        typer.secho(f"config error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
