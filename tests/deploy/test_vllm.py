"""deploy.vllm: planning is pure; deploying runs real processes — a fake ``nvidia-smi`` on PATH and
a fake "vLLM" (a script that prints a captured vLLM log, then serves the fake upstream)."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from deploy.gpu import PowerCappedError
from deploy.kernels import parse_kernel_log
from deploy.vllm import DeployError, deploy_vllm, plan_replicas, upstream_toml
from gateway.config import parse_config
from tests.deploy.test_gpu import FULL_POWER, TWO_CAPPED, fake_smi

DATA = Path(__file__).parent / "data"
PROFILES = parse_config({}).profiles

FAKE_VLLM = """\
import os, pathlib, sys
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
print("fake-vllm argv:", " ".join(args), flush=True)
print("fake-vllm CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", ""), flush=True)
sys.stdout.write(pathlib.Path(os.environ["FAKE_VLLM_LOG"]).read_text())
sys.stdout.flush()
os.execv(sys.executable, [sys.executable, "-m", "plumbline_kit.fakes.upstream", "--no-record",
         "--port", opt("--port"), "--model", opt("--served-model-name")])
"""


# --- planning (pure) ----------------------------------------------------------------------------


def test_one_replica_per_gpu_by_default():
    plans = plan_replicas("qwen3-thinking", PROFILES["qwen3-thinking"], [0, 1, 2, 3], "/m", "q3")
    assert [p.name for p in plans] == [f"qwen3-thinking-gpu{i}" for i in range(4)]
    assert [p.spec.port for p in plans] == [8401, 8402, 8403, 8404]
    assert [p.spec.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0", "1", "2", "3"]
    for plan in plans:
        assert plan.spec.reasoning_parser == "qwen3" and plan.spec.tool_call_parser == "hermes"
        assert "--tensor-parallel-size" not in plan.spec.extra_args


def test_tp_groups_from_flag_or_profile():
    profile = PROFILES["smollm2"].model_copy(
        update={"vllm_args": ["--kv-cache-dtype", "fp8"], "vllm_env": {"VLLM_X": "1"}}
    )
    plans = plan_replicas("smollm2", profile, [4, 5, 6, 7], "/m", "s", tp=2, base_port=9000)
    assert [p.gpus for p in plans] == [(4, 5), (6, 7)]
    assert [p.spec.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["4,5", "6,7"]
    assert plans[0].spec.extra_args == ("--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8")
    assert plans[1].spec.extra_env["VLLM_X"] == "1" and plans[1].spec.port == 9001
    # The profile says the model needs two cards (until Profile has the field, set it by copy).
    needs_two = PROFILES["smollm2"].model_copy(update={"tensor_parallel": 2})
    assert [p.gpus for p in plan_replicas("s", needs_two, [0, 1], "/m", "s")] == [(0, 1)]
    with pytest.raises(DeployError, match="groups of 3"):
        plan_replicas("s", PROFILES["smollm2"], [0, 1, 2, 3], "/m", "s", tp=3)


def test_upstream_entries_load_as_gateway_config():
    plans = plan_replicas("smollm2", PROFILES["smollm2"], [0, 1], "/m", "smol")
    text = "\n".join(upstream_toml(p, node="box") for p in plans)
    doc = tomllib.loads(text + "\n[nodes.box]\ncost_per_hour = 1.0\n")
    config = parse_config(doc)
    assert [(u.name, u.kind, u.base_url, u.model, u.profile, u.node) for u in config.upstreams] == [
        ("smollm2-gpu0", "vllm", "http://127.0.0.1:8401/v1", "smol", "smollm2", "box"),
        ("smollm2-gpu1", "vllm", "http://127.0.0.1:8402/v1", "smol", "smollm2", "box"),
    ]


# --- deploying real processes -------------------------------------------------------------------


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int):
    """A fake GPU host: nvidia-smi on PATH, a fake vLLM command, a captured TP=2 NVFP4 log."""

    def install(smi_output: str) -> dict:
        script = fake_smi(tmp_path / "bin", smi_output)
        monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_VLLM_LOG", str(DATA / "vllm_gpu_tp2_nvfp4.log"))
        fake = tmp_path / "fake_vllm.py"
        fake.write_text(FAKE_VLLM)
        return dict(
            run_dir=tmp_path / "engines",
            vllm_command=(sys.executable, str(fake)),
            base_port=port,
            timeout_s=60.0,
            echo=lambda line: None,
        )

    return install


def test_deploy_launches_health_waits_records_and_registers(host, tmp_path: Path):
    opts = host(FULL_POWER)
    register = tmp_path / "config.toml"
    register.write_text("[server]\nport = 8400\n")
    seen: list[tuple[str, list[str]]] = []

    def serve(replicas):
        for replica in replicas:
            models = httpx.get(replica.base_url + "/models", trust_env=False).json()
            seen.append((replica.base_url, [m["id"] for m in models["data"]]))

    replicas = deploy_vllm(
        "qwen3-thinking",
        "2,3",
        model="/models/q3",
        served_model_name="q3",
        register=register,
        serve=serve,
        **opts,
    )
    base = opts["base_port"]
    assert seen == [
        (f"http://127.0.0.1:{base}/v1", ["q3"]),
        (f"http://127.0.0.1:{base + 1}/v1", ["q3"]),
    ]
    for replica, gpu in zip(replicas, (2, 3), strict=True):
        with pytest.raises(ProcessLookupError):  # stopped on return
            os.kill(replica.pid, 0)
        log = replica.log_path.read_text()
        assert f"fake-vllm CUDA_VISIBLE_DEVICES={gpu}\n" in log
        assert "--reasoning-parser qwen3" in log and "--enable-auto-tool-choice" in log
        assert "--enable-prompt-tokens-details" in log  # or vLLM reports no cached tokens
        assert "--kv-cache-memory-bytes" not in log  # the CPU recipe is not used on GPUs
        record = json.loads(replica.record_path.read_text())
        assert record["log"] == str(replica.log_path)
        assert record["gpus"] == [gpu] and record["cuda_visible_devices"] == str(gpu)
        assert record["power"] == [{"index": gpu, "limit_w": 600.0, "max_limit_w": 600.0}]
        expected = parse_kernel_log((DATA / "vllm_gpu_tp2_nvfp4.log").read_text())
        assert [(k["category"], k["selected"]) for k in record["kernels"]] == [
            (k.category, k.selected) for k in expected
        ]
        assert ("moe", "MARLIN") in [(k["category"], k["selected"]) for k in record["kernels"]]
    config = parse_config(tomllib.loads(register.read_text()))
    assert config.server.port == 8400
    assert [u.name for u in config.upstreams] == ["qwen3-thinking-gpu2", "qwen3-thinking-gpu3"]
    assert {u.model for u in config.upstreams} == {"q3"}


def test_power_capped_host_is_refused_before_anything_starts(host):
    opts = host(TWO_CAPPED)
    with pytest.raises(PowerCappedError, match="GPU 1: 400 W"):
        deploy_vllm("smollm2", "0,1", model="/m", serve=lambda r: None, **opts)
    assert not opts["run_dir"].exists()
    # Told the cap is intended, it deploys and records the cap with the replica.
    replicas = deploy_vllm(
        "smollm2", "0,1", model="/m", tp=2, allow_power_capped=True, serve=lambda r: None, **opts
    )
    assert len(replicas) == 1 and replicas[0].plan.gpus == (0, 1)
    record = json.loads(replicas[0].record_path.read_text())
    assert record["tensor_parallel"] == 2 and record["cuda_visible_devices"] == "0,1"
    assert [g["limit_w"] for g in record["power"]] == [600.0, 400.0]
    assert "--tensor-parallel-size 2" in replicas[0].log_path.read_text()


def test_bad_requests_are_refused_with_a_reason(host):
    opts = host(FULL_POWER)
    with pytest.raises(DeployError, match="unknown profile"):
        deploy_vllm("no-such", "0", model="/m", **opts)
    with pytest.raises(DeployError, match="pass --model"):
        deploy_vllm("smollm2", "0", **opts)


def test_the_cli_refuses_power_capped_gpus_before_starting_anything(host, tmp_path: Path):
    """`plumbline deploy vllm` as typed: a power-capped GPU is a short error (exit 2) that names
    it and says how to go on anyway; no engine was started."""
    from typer.testing import CliRunner

    from gateway import cli

    host(TWO_CAPPED)
    config = tmp_path / "plumbline.toml"
    config.write_text("")
    args = ["deploy", "vllm", "--profile", "smollm2", "--gpus", "0,1", "--config", str(config)]
    result = CliRunner().invoke(cli.app, [*args, "--model", "/m"])
    assert result.exit_code == 2
    assert "GPU 1: 400 W" in result.output and "allow-power-capped" in result.output
    assert not (tmp_path / "engines").exists()
