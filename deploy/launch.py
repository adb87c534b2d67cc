"""From the config to running local replicas: what `plumbline up` starts.

Each `[[upstreams]]` entry with a `launch` table becomes a `LaunchSpec`: the engine, the weights
(a Hugging Face folder converted once from the GGUF for vLLM, the GGUF itself for llama.cpp), the
host and port taken from the upstream's `base_url`, and the profile's parsers, flags and
environment — the same recipe the gateway applies on every request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from deploy.engine import LaunchSpec
from deploy.localmodel import ensure_hf_model, gguf_path
from deploy.supervisor import Replica, Supervisor, backend_lines
from gateway.config import Config, Upstream


def _weights(upstream: Upstream) -> str:
    assert upstream.launch is not None
    source = upstream.launch.source
    local = Path(source).expanduser()
    if local.exists():
        return str(local)
    if upstream.launch.engine == "llamacpp":
        return str(gguf_path(source))
    return str(ensure_hf_model(source))


def spec_for(config: Config, upstream: Upstream, model: str | None = None) -> LaunchSpec:
    """The launch spec of one upstream. `model` overrides the weights path (tests, dry runs)."""
    launch = upstream.launch
    if launch is None:
        raise ValueError(f"upstream {upstream.name!r} has no [launch] table")
    url = urlsplit(upstream.base_url)
    if url.hostname is None or url.port is None:
        raise ValueError(f"upstream {upstream.name!r}: base_url needs an explicit host and port")
    profile = config.profiles.get(upstream.profile) if upstream.profile else None
    vllm = launch.engine == "vllm"
    extra_args = list(launch.args)
    extra_env = dict(launch.env)
    if vllm and profile is not None:
        extra_args = [*profile.vllm_args, *extra_args]
        extra_env = {**profile.vllm_env, **extra_env}
    return LaunchSpec(
        engine=launch.engine,
        model=model or _weights(upstream),
        served_model_name=upstream.model,
        host=url.hostname,
        port=url.port,
        reasoning_parser=profile.reasoning_parser if vllm and profile else None,
        tool_call_parser=profile.tool_call_parser if vllm and profile else None,
        max_model_len=launch.max_model_len,
        threads=launch.threads,
        extra_args=tuple(extra_args),
        extra_env=extra_env,
    )


def launched(config: Config) -> list[Upstream]:
    return [u for u in config.upstreams if u.launch is not None]


def run_dir(config: Config) -> Path:
    return config.root / "var" / "engines"


@contextlib.contextmanager
def launch_local(
    config: Config, echo: Callable[[str], None] = print
) -> Iterator[Sequence[Replica]]:
    """Start every launchable upstream, wait until all are healthy, stop them all on exit."""
    upstreams = launched(config)
    if not upstreams:
        yield ()
        return
    echo(f"plumbline: preparing weights for {len(upstreams)} local replica(s)…")
    specs = [spec_for(config, u) for u in upstreams]
    timeout = max(u.launch.startup_timeout_s for u in upstreams if u.launch)
    supervisor = Supervisor(specs, run_dir(config), timeout=timeout)
    echo(
        "plumbline: starting "
        + ", ".join(f"{s.engine} {s.served_model_name}@{s.port}" for s in specs)
    )
    with supervisor as replicas:
        for replica in replicas:
            seconds = supervisor.startup_seconds.get(replica.name, 0.0)
            echo(f"plumbline: {replica.name} healthy after {seconds:.1f}s (log {replica.log_path})")
            for line in backend_lines(replica.log_path)[:8]:
                echo(f"  {line.strip()[-160:]}")
        yield replicas
