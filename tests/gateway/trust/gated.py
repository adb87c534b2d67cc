"""A gateway with one gated route over two upstreams, `dear` and `cheap` (both SmolLM2's
profile), and a smoke-suite round: the gate's end-to-end tests and `bench/round_loop_lag.py` use
it. It imports nothing of the eval suite, so that a process using it makes a round's imports
cold."""

from __future__ import annotations

from pathlib import Path

from tests.harness import config_from, free_port


def gated_config(a: str, b: str, root: Path) -> object:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "port": free_port()},
            "upstreams": [
                {"name": "dear", "kind": "vllm", "base_url": a, "model": "m", "profile": "smollm2"},
                {
                    "name": "cheap",
                    "kind": "vllm",
                    "base_url": b,
                    "model": "m",
                    "profile": "smollm2",
                },
            ],
            "models": {
                "smol": {
                    "profile": "smollm2",
                    "upstreams": ["dear", "cheap"],
                    "policy": "cheapest_within_floor",
                    # A coarse gate on a small round (what the embedded CPU default can afford):
                    # it tells apart a 50-point gap, and says so in every decision.
                    "gate": {
                        "min_items": 5,
                        "round_items": 5,
                        "detect_gap": 0.5,
                        "prices": {"dear": 10.0, "cheap": 1.0},
                    },
                }
            },
            "evals": {
                "suite": "smoke",
                "concurrency": 4,
                "timeout_s": 30,
                "runs_dir": str(root / "runs"),
                "rotate_seed": False,
            },
        }
    )
