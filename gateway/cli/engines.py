"""`plumbline deploy vllm`: launch engines from profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway.cli.common import ConfigOption, load

deploy_app = typer.Typer(no_args_is_help=True, help="Launch engines from profiles.")


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

    cfg = load(config)
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
