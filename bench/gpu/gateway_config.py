"""Write the GPU run's gateway config: the replicas `plumbline deploy vllm --register` wrote, and
three routes over them.

    smollm2        the first replica alone, no profile: the same request body as a client sending
                   straight to that replica, so gateway and direct are compared like for like
    smollm2-pair   both replicas, least outstanding requests, no profile
    smollm2-eval   both replicas with the smollm2 profile (its sampling filled in): the eval route

    python bench/gpu/gateway_config.py UPSTREAMS.toml OUT.toml [PORT [STREAM_HEAD]]

STREAM_HEAD (`first_event`, the default, or `at_once`) is every route's `stream_head`.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from gateway.config import load_config


def render(upstreams_toml: str, run_dir: Path, port: int, stream_head: str = "first_event") -> str:
    names = [u["name"] for u in tomllib.loads(upstreams_toml)["upstreams"]]
    if not names:
        raise SystemExit("no [[upstreams]] registered")
    head = (
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nhealth_interval_s = 5\n'
        f'ttft_timeout_s = 120\n\n[store]\nurl = "sqlite:///{run_dir}/plumbline.db"\n\n'
    )
    said = f'stream_head = "{stream_head}"\n'
    routes = (
        f"[models.smollm2]\nupstreams = {json.dumps(names[:1])}\n{said}\n"
        f"[models.smollm2-pair]\nupstreams = {json.dumps(names)}\n{said}\n"
        f'[models.smollm2-eval]\nupstreams = {json.dumps(names)}\nprofile = "smollm2"\n{said}'
    )
    return head + upstreams_toml.strip() + "\n\n" + routes


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 8400
    head = sys.argv[4] if len(sys.argv) > 4 else "first_event"
    dst.write_text(render(src.read_text(), dst.parent.resolve(), port, head), encoding="utf-8")
    config = load_config(dst)
    for name, route in config.models.items():
        print(f"{name}: {route.policy} over {', '.join(route.upstreams)}")


if __name__ == "__main__":
    main()
