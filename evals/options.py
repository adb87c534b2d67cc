"""The eval CLI's options, as typer reads them: each a type with its help (evals/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

BaseUrl = Annotated[str, typer.Option(help="The gateway's OpenAI base URL")]
Targets = Annotated[list[str], typer.Option("--target", "-t", help="A model name on the gateway")]
RunsDir = Annotated[Path, typer.Option(help="Where runs are kept")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        envvar="PLUMBLINE_API_KEY",
        show_envvar=True,
        help="A client key of the gateway (where its /v1 needs one). Default: the eval lane's "
        "credential named by [evals].lane_key_env in --config, when set",
    ),
]

Datasets = Annotated[
    list[str] | None,
    typer.Option(help="FILE.jsonl:SCORER, repeatable (scorers: see evals/dataset.py)"),
]
ReasoningGym = Annotated[
    int,
    typer.Option(
        min=0,
        help="Of the math items, this many from reasoning-gym's generators at hard "
        "settings (needs pip install reasoning-gym)",
    ),
]
Keep = Annotated[
    bool,
    typer.Option(
        "--keep",
        help="Also keep the results in the gateway's store (see --config), where "
        "eval report --from-store finds them, as it finds scheduled runs",
    ),
]
KeepConfig = Annotated[
    Path | None,
    typer.Option(
        help="Gateway config whose store --keep writes to (default: $PLUMBLINE_CONFIG), "
        "and whose [evals].lane_key_env names the eval lane's credential"
    ),
]
Tripwire = Annotated[
    bool,
    typer.Option(help="Run the tripwire on each target first; one that fails is not scored"),
]
TripwireMaxWrong = Annotated[
    int | None,
    typer.Option(help="Wrong tripwire answers that fail a target (default: only collapse)"),
]
