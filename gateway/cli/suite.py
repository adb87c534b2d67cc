"""`plumbline eval run|report|tripwire|logits`: the eval suite, through the gateway, loaded
only when called."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup


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
