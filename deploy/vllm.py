"""`plumbline deploy vllm`: vLLM replicas on a host's GPUs, launched from a profile.

    plumbline deploy vllm --profile qwen3-thinking --gpus 0,1,2,3 --model /models/Qwen3-8B

1. **Plan** (pure, `plan_replicas`): the GPUs are cut into groups of the tensor-parallel size
   (``--tp``, else the profile's ``tensor_parallel``, else 1 — one replica per GPU) and each group
   becomes ``replicas_per_gpu`` (default 1) `LaunchSpec` entries on consecutive ports
   (``base_port + i``) with ``CUDA_VISIBLE_DEVICES`` set to the group, the profile's parsers, its
   ``vllm_args`` (kernel/MoE backends, KV-cache dtype, block size, ``--enforce-eager``) and its
   ``vllm_env``. Replicas that share a group split its memory: each gets
   ``--gpu-memory-utilization`` (given, else `memory_share`: 0.90 over their number).
2. **Check**: the GPUs' power limits (`deploy.gpu.check_power_limits`); a capped card stops the
   deploy unless ``allow_power_capped``.
3. **Launch** every replica with `deploy.supervisor.Supervisor` and health-wait each. Replicas
   that share GPUs start in waves, the k-th of every group in wave k, each wave once the one
   before is healthy: vLLM sizes its KV cache from the device's free memory after a profiling
   run, and another engine allocating on the same card meanwhile is counted as its own use.
4. **Read back** what each engine really selected: the "Using … kernel/backend" lines of its log,
   parsed by `deploy.kernels`, written as JSON next to the log and printed.
5. **Register**: one ``[[upstreams]]`` TOML entry per replica (kind vllm, base_url, model,
   profile, node), printed and, with ``register``, appended to a config file.

Then it holds the replicas until interrupted (``serve``), and stops them all.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploy.engine import VLLM_MODULE, LaunchSpec, base_url, vllm_args
from deploy.gpu import GpuPower, check_power_limits, parse_gpu_list
from deploy.kernels import KernelChoice, parse_kernel_log
from deploy.supervisor import Replica, Supervisor, backend_lines
from gateway.config import Config, Profile, parse_config


class DeployError(ValueError):
    """The profile, GPU list, tensor-parallel size or model cannot make a valid plan."""


@dataclass(frozen=True)
class ReplicaPlan:
    """One replica to start: its launch spec, its GPUs, and its name as a gateway upstream."""

    name: str
    profile: str
    gpus: tuple[int, ...]
    spec: LaunchSpec
    # Start wave: the k-th replica of a GPU group starts once waves < k are healthy.
    wave: int = 0

    @property
    def tensor_parallel(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class DeployedReplica:
    """A replica that came up healthy, with what its engine selected."""

    plan: ReplicaPlan
    base_url: str
    log_path: Path
    record_path: Path
    pid: int
    startup_seconds: float
    kernels: tuple[KernelChoice, ...]
    backend_lines: tuple[str, ...]


def tensor_parallel_size(profile: Profile, gpu_count: int, tp: int | None = None) -> int:
    """GPUs per replica: `tp` when given, else the profile's ``tensor_parallel`` (default 1)."""
    size = tp if tp is not None else int(getattr(profile, "tensor_parallel", 1) or 1)
    if size < 1:
        raise DeployError(f"tensor-parallel size must be >= 1, got {size}")
    if gpu_count % size:
        raise DeployError(f"{gpu_count} GPU(s) cannot be split into groups of {size}")
    return size


# vLLM's own default share of a GPU's memory; replicas sharing a card split this much of it.
GPU_MEMORY_SHARE = 0.90
MEMORY_FLAG = "--gpu-memory-utilization"


def memory_share(replicas_per_gpu: int, total: float = GPU_MEMORY_SHARE) -> float:
    """Each replica's ``--gpu-memory-utilization`` when `replicas_per_gpu` share a card: `total`
    split evenly, rounded down to a hundredth (vLLM refuses a sum over the card's free memory)."""
    if replicas_per_gpu < 1:
        raise DeployError(f"replicas per GPU must be >= 1, got {replicas_per_gpu}")
    return math.floor(100 * total / replicas_per_gpu) / 100


def plan_replicas(
    profile_name: str,
    profile: Profile,
    gpus: Sequence[int],
    model: str,
    served_model_name: str,
    tp: int | None = None,
    host: str = "127.0.0.1",
    base_port: int = 8401,
    replicas_per_gpu: int = 1,
    gpu_memory_utilization: float | None = None,
) -> list[ReplicaPlan]:
    """`replicas_per_gpu` plans per group of `tp` GPUs, on consecutive ports from
    `base_port`. Replicas sharing a group each get ``--gpu-memory-utilization``:
    `gpu_memory_utilization` when given (their sum must stay <= 1), else `memory_share`."""
    if not gpus:
        raise DeployError("no GPUs given")
    size = tensor_parallel_size(profile, len(gpus), tp)
    share = _memory_flag(profile, replicas_per_gpu, gpu_memory_utilization)
    plans = []
    slots = [
        (tuple(gpus[i : i + size]), k)
        for i in range(0, len(gpus), size)
        for k in range(replicas_per_gpu)
    ]
    for index, (group, k) in enumerate(slots):
        port = base_port + index
        if port > 65535:
            raise DeployError(f"port {port} is out of range; lower base_port")
        extra_args = [*profile.vllm_args]
        if size > 1:
            extra_args = ["--tensor-parallel-size", str(size), *extra_args]
        if share is not None:
            extra_args = [MEMORY_FLAG, f"{share:g}", *extra_args]
        env = {**profile.vllm_env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, group))}
        spec = LaunchSpec(
            engine="vllm",
            model=model,
            served_model_name=served_model_name,
            host=host,
            port=port,
            reasoning_parser=profile.reasoning_parser,
            tool_call_parser=profile.tool_call_parser,
            max_model_len=profile.context_window,
            extra_args=tuple(extra_args),
            extra_env=env,
        )
        name = f"{profile_name}-gpu{'-'.join(map(str, group))}"
        if replicas_per_gpu > 1:
            name += f"-r{k}"
        plans.append(ReplicaPlan(name=name, profile=profile_name, gpus=group, spec=spec, wave=k))
    return plans


def _memory_flag(
    profile: Profile, replicas_per_gpu: int, utilization: float | None
) -> float | None:
    """The ``--gpu-memory-utilization`` every replica gets, or None to leave vLLM's default."""
    if replicas_per_gpu < 1:
        raise DeployError(f"replicas per GPU must be >= 1, got {replicas_per_gpu}")
    if utilization is not None and not 0 < utilization <= 1:
        raise DeployError(f"gpu memory utilization must be in (0, 1], got {utilization:g}")
    if utilization is not None and utilization * replicas_per_gpu > 1 + 1e-9:
        raise DeployError(
            f"{replicas_per_gpu} replicas at {utilization:g} of a GPU each ask for more than "
            "the whole card"
        )
    if any(a == MEMORY_FLAG or a.startswith(MEMORY_FLAG + "=") for a in profile.vllm_args):
        if utilization is not None or replicas_per_gpu > 1:
            raise DeployError(
                f"the profile's vllm_args set {MEMORY_FLAG}; drop it there to split a GPU"
            )
        return None
    if utilization is not None:
        return utilization
    return memory_share(replicas_per_gpu) if replicas_per_gpu > 1 else None


def gpu_args(spec: LaunchSpec) -> list[str]:
    """vLLM OpenAI-server flags for a GPU replica: the spec's, and nothing CPU-specific.

    (`deploy.engine.vllm_args` builds both; the CPU recipe adds eager mode and a 1 GiB KV cache.)
    """
    return vllm_args(spec, cpu=False)


def upstream_toml(plan: ReplicaPlan, node: str | None = None) -> str:
    """The ``[[upstreams]]`` entry that registers `plan`'s replica with the gateway."""
    fields: dict[str, str] = {
        "name": plan.name,
        "kind": "vllm",
        "base_url": base_url(plan.spec),
        "model": plan.spec.served_model_name,
        "profile": plan.profile,
    }
    if node:
        fields["node"] = node
    lines = ["[[upstreams]]"] + [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
    return "\n".join(lines) + "\n"


def replica_record(
    replica: DeployedReplica, argv: Sequence[str], power: Sequence[GpuPower]
) -> dict[str, Any]:
    """What is written next to a replica's log: where it runs and what its engine selected."""
    plan = replica.plan
    by_index = {g.index: g for g in power}
    return {
        "name": plan.name,
        "profile": plan.profile,
        "base_url": replica.base_url,
        "model": plan.spec.model,
        "served_model_name": plan.spec.served_model_name,
        "gpus": list(plan.gpus),
        "tensor_parallel": plan.tensor_parallel,
        "pid": replica.pid,
        "startup_seconds": round(replica.startup_seconds, 2),
        "argv": list(argv),
        "cuda_visible_devices": plan.spec.extra_env.get("CUDA_VISIBLE_DEVICES"),
        "power": [asdict(by_index[i]) for i in plan.gpus if i in by_index],
        "kernels": [asdict(k) for k in replica.kernels],
        "backend_lines": list(replica.backend_lines),
        "log": str(replica.log_path),
    }


def resolve_profile(name: str, config: Config | None) -> Profile:
    """The profile `name` from `config`, or from the built-in profiles when no config is given."""
    profiles = (config or parse_config({})).profiles
    if name not in profiles:
        raise DeployError(f"unknown profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]


def wait_forever(replicas: Sequence[DeployedReplica]) -> None:
    """Hold the replicas until Ctrl-C."""
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


def deploy_vllm(
    profile: str,
    gpus: str,
    model: str | None = None,
    served_model_name: str | None = None,
    tp: int | None = None,
    allow_power_capped: bool = False,
    base_port: int = 8401,
    host: str = "127.0.0.1",
    node: str | None = None,
    register: Path | None = None,
    run_dir: Path = Path("var/engines"),
    config: Config | None = None,
    timeout_s: float = 1800.0,
    replicas_per_gpu: int = 1,
    gpu_memory_utilization: float | None = None,
    nvidia_smi: str = "nvidia-smi",
    vllm_command: Sequence[str] = (sys.executable, "-m", VLLM_MODULE),
    echo: Callable[[str], None] = print,
    serve: Callable[[Sequence[DeployedReplica]], None] = wait_forever,
) -> list[DeployedReplica]:
    """Check, launch, health-wait, read back and register vLLM replicas; hold them while `serve`.

    `model` is what vLLM's ``--model`` gets (a folder or a Hugging Face id); it defaults to the
    profile's ``weights``. `served_model_name` defaults to the profile name. `vllm_command` is the
    argv prefix the flags are appended to. `replicas_per_gpu` replicas share each GPU group,
    splitting its memory (`plan_replicas`), started in waves (the module's step 3). Returns the
    replicas (stopped by the time it returns).
    """
    chosen = resolve_profile(profile, config)
    weights = model or getattr(chosen, "weights", None)
    if not weights:
        raise DeployError(f"profile {profile!r} names no weights; pass --model PATH")
    gpu_ids = parse_gpu_list(gpus)
    plans = plan_replicas(
        profile,
        chosen,
        gpu_ids,
        weights,
        served_model_name or profile,
        tp,
        host,
        base_port,
        replicas_per_gpu,
        gpu_memory_utilization,
    )
    power = _power(gpu_ids, allow_power_capped, nvidia_smi, echo)
    argvs: Mapping[int, list[str]] = {
        p.spec.port: [*vllm_command, *gpu_args(p.spec)] for p in plans
    }
    with contextlib.ExitStack() as stack:
        replicas = _start_waves(stack, plans, argvs, run_dir, timeout_s, echo)
        _announce(replicas, argvs, power, node, register, echo)
        serve(replicas)
    return replicas


def _power(
    gpu_ids: Sequence[int], allow_capped: bool, nvidia_smi: str, echo: Callable[[str], None]
) -> list[GpuPower]:
    """The GPUs' power limits (refusing capped ones unless allowed), capped ones said."""
    power = check_power_limits(gpu_ids, allow_capped, nvidia_smi)
    for gpu in power:
        if gpu.capped:
            limits = f"{gpu.limit_w:g}/{gpu.max_limit_w:g} W"
            echo(f"plumbline: GPU {gpu.index} is power-capped ({limits})")
    return list(power)


def _start_waves(
    stack: contextlib.ExitStack[Any],
    plans: Sequence[Any],
    argvs: Mapping[int, list[str]],
    run_dir: Path,
    timeout_s: float,
    echo: Callable[[str], None],
) -> list[DeployedReplica]:
    """Start the replicas wave by wave (each held open on `stack`), read each one back."""
    by_port = {p.spec.port: p for p in plans}
    replicas = []
    for wave in sorted({p.wave for p in plans}):
        batch = [p for p in plans if p.wave == wave]
        supervisor = Supervisor(
            [p.spec for p in batch], run_dir, timeout=timeout_s, command=lambda s: argvs[s.port]
        )
        echo("plumbline: starting " + ", ".join(f"{p.name}@{p.spec.port}" for p in batch))
        started = stack.enter_context(supervisor)
        replicas += [
            _read_back(by_port[r.spec.port], r, supervisor.startup_seconds.get(r.name, 0.0))
            for r in started
        ]
    return replicas


def _announce(
    replicas: Sequence[DeployedReplica],
    argvs: Mapping[int, list[str]],
    power: Sequence[Any],
    node: str | None,
    register: Path | None,
    echo: Callable[[str], None],
) -> None:
    """Write each replica's record, print its summary and the upstream entries, and append
    them to `register` when given."""
    for replica in replicas:
        record = replica_record(replica, argvs[replica.plan.spec.port], power)
        replica.record_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        echo(_summary(replica))
    entries = "\n".join(upstream_toml(r.plan, node) for r in replicas)
    echo(entries)
    if register is not None:
        with register.open("a", encoding="utf-8") as fh:
            fh.write("\n" + entries)
        echo(f"plumbline: registered {len(replicas)} upstream(s) in {register}")


def _read_back(plan: ReplicaPlan, replica: Replica, seconds: float) -> DeployedReplica:
    lines = tuple(backend_lines(replica.log_path))
    log_text = replica.log_path.read_text(encoding="utf-8", errors="replace")
    return DeployedReplica(
        plan=plan,
        base_url=replica.base_url,
        log_path=replica.log_path,
        record_path=replica.log_path.with_suffix(".json"),
        pid=replica.process.pid,
        startup_seconds=seconds,
        kernels=tuple(parse_kernel_log(log_text)),
        backend_lines=lines,
    )


def _summary(replica: DeployedReplica) -> str:
    plan = replica.plan
    head = (
        f"plumbline: {plan.name} healthy at {replica.base_url} "
        f"on GPU {','.join(map(str, plan.gpus))}"
        f" after {replica.startup_seconds:.1f}s (record {replica.record_path})"
    )
    picks = [
        f"  {k.category}: {k.selected}" + (f" ({k.detail})" if k.detail else "")
        for k in replica.kernels
    ]
    return "\n".join([head, *picks])
