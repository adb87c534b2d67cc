"""deploy.vllm: several replicas sharing one GPU (or TP group) split its memory and start one wave
after another, on any number of GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from deploy.vllm import DeployError, deploy_vllm, gpu_args, memory_share, plan_replicas
from gateway.config import parse_config
from tests.deploy.test_gpu import FULL_POWER
from tests.deploy.test_vllm import host  # noqa: F401  (the fake GPU host fixture)

PROFILES = parse_config({}).profiles


def _flag(args: list[str] | tuple[str, ...]) -> str | None:
    args = list(args)
    return (
        args[args.index("--gpu-memory-utilization") + 1]
        if "--gpu-memory-utilization" in args
        else None
    )


def test_one_replica_per_gpu_leaves_vllms_memory_default():
    plans = plan_replicas("smollm2", PROFILES["smollm2"], [0, 1], "/m", "s")
    assert [p.name for p in plans] == ["smollm2-gpu0", "smollm2-gpu1"]
    assert [p.wave for p in plans] == [0, 0]
    assert all(_flag(gpu_args(p.spec)) is None for p in plans)


def test_two_replicas_on_one_gpu_split_its_memory_and_start_in_two_waves():
    plans = plan_replicas("smollm2", PROFILES["smollm2"], [0], "/m", "s", replicas_per_gpu=2)
    assert [p.name for p in plans] == ["smollm2-gpu0-r0", "smollm2-gpu0-r1"]
    assert [p.spec.port for p in plans] == [8401, 8402]
    assert [p.spec.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0", "0"]
    assert [p.wave for p in plans] == [0, 1]
    assert [_flag(gpu_args(p.spec)) for p in plans] == ["0.45", "0.45"]


def test_n_gpus_in_tp_groups_each_shared_by_several_replicas():
    plans = plan_replicas(
        "smollm2", PROFILES["smollm2"], [0, 1, 2, 3], "/m", "s", tp=2, replicas_per_gpu=3
    )
    assert [(p.gpus, p.wave) for p in plans] == [
        ((0, 1), 0),
        ((0, 1), 1),
        ((0, 1), 2),
        ((2, 3), 0),
        ((2, 3), 1),
        ((2, 3), 2),
    ]
    assert [p.spec.port for p in plans] == list(range(8401, 8407))
    assert {p.spec.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans[3:]} == {"2,3"}
    for plan in plans:
        assert _flag(plan.spec.extra_args) == "0.3"
        assert "--tensor-parallel-size" in plan.spec.extra_args
    assert plans[-1].name == "smollm2-gpu2-3-r2"


def test_memory_share_rounds_down_so_the_shares_fit():
    assert [memory_share(n) for n in (1, 2, 3, 4, 7)] == [0.9, 0.45, 0.3, 0.22, 0.12]
    assert all(memory_share(n) * n <= 0.9 for n in range(1, 20))
    with pytest.raises(DeployError, match=">= 1"):
        memory_share(0)


def test_an_explicit_share_is_used_and_checked():
    profile = PROFILES["smollm2"]
    plans = plan_replicas(
        "smollm2", profile, [0], "/m", "s", replicas_per_gpu=2, gpu_memory_utilization=0.3
    )
    assert [_flag(p.spec.extra_args) for p in plans] == ["0.3", "0.3"]
    one = plan_replicas("smollm2", profile, [0], "/m", "s", gpu_memory_utilization=0.5)
    assert _flag(one[0].spec.extra_args) == "0.5"
    with pytest.raises(DeployError, match="more than the whole card"):
        plan_replicas(
            "smollm2", profile, [0], "/m", "s", replicas_per_gpu=2, gpu_memory_utilization=0.6
        )
    with pytest.raises(DeployError, match=r"in \(0, 1\]"):
        plan_replicas("smollm2", profile, [0], "/m", "s", gpu_memory_utilization=1.5)
    with pytest.raises(DeployError, match=">= 1"):
        plan_replicas("smollm2", profile, [0], "/m", "s", replicas_per_gpu=0)


def test_a_profile_that_sets_the_share_itself_cannot_be_split():
    fixed = PROFILES["smollm2"].model_copy(
        update={"vllm_args": ["--gpu-memory-utilization", "0.8"]}
    )
    (alone,) = plan_replicas("smollm2", fixed, [0], "/m", "s")
    assert _flag(alone.spec.extra_args) == "0.8"  # the profile's, once
    assert list(alone.spec.extra_args).count("--gpu-memory-utilization") == 1
    with pytest.raises(DeployError, match="drop it there"):
        plan_replicas("smollm2", fixed, [0], "/m", "s", replicas_per_gpu=2)


def test_replicas_sharing_a_gpu_start_after_the_wave_before_is_healthy(host, tmp_path: Path):  # noqa: F811
    """Two fake vLLM replicas on GPU 0: the second is started only once the first answers."""
    opts = host(FULL_POWER)
    base = opts["base_port"]
    first_healthy_at_second_start: list[bool] = []

    def echo(line: str) -> None:
        if line.startswith("plumbline: starting ") and "-r1@" in line:
            try:
                code = httpx.get(f"http://127.0.0.1:{base}/health", trust_env=False).status_code
            except httpx.HTTPError:
                code = 0
            first_healthy_at_second_start.append(code == 200)

    seen: list[list[str]] = []

    def serve(replicas):
        for replica in replicas:
            models = httpx.get(replica.base_url + "/models", trust_env=False).json()
            seen.append([m["id"] for m in models["data"]])

    replicas = deploy_vllm(
        "smollm2",
        "0",
        model="/m",
        served_model_name="smol",
        replicas_per_gpu=2,
        serve=serve,
        **{**opts, "echo": echo},
    )
    assert first_healthy_at_second_start == [True]
    assert seen == [["smol"], ["smol"]]
    assert [r.plan.name for r in replicas] == ["smollm2-gpu0-r0", "smollm2-gpu0-r1"]
    for replica in replicas:
        with pytest.raises(ProcessLookupError):  # both waves stopped on return
            os.kill(replica.pid, 0)
        log = replica.log_path.read_text()
        assert "--gpu-memory-utilization 0.45" in log
        assert "fake-vllm CUDA_VISIBLE_DEVICES=0\n" in log
        record = json.loads(replica.record_path.read_text())
        assert record["gpus"] == [0] and "0.45" in record["argv"]


def test_the_cli_takes_the_split_and_refuses_one_over_the_card(host, tmp_path: Path):  # noqa: F811
    """`plumbline deploy vllm --replicas-per-gpu 2 --gpu-memory-utilization 0.6`: a short error
    (exit 2) before anything starts."""
    from typer.testing import CliRunner

    from gateway import cli

    host(FULL_POWER)
    config = tmp_path / "plumbline.toml"
    config.write_text("")
    args = ["deploy", "vllm", "--profile", "smollm2", "--gpus", "0", "--config", str(config)]
    split = ["--replicas-per-gpu", "2", "--gpu-memory-utilization", "0.6"]
    result = CliRunner().invoke(cli.app, [*args, "--model", "/m", *split])
    assert result.exit_code == 2
    assert "more than the whole card" in result.output
    result = CliRunner().invoke(cli.app, [*args, "--model", "/m", "--replicas-per-gpu", "0"])
    assert result.exit_code == 2  # typer's own range check
