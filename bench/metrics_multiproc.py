"""What prometheus-client's multiprocess mode costs each request and each scrape.

`plumbline serve --workers N` runs prometheus-client in multiprocess mode (values in mmap'd
files under PROMETHEUS_MULTIPROC_DIR, merged at each scrape); one process keeps them in memory.
The mode is chosen when prometheus_client is imported, so each mode is measured in a child
process of its own:

    python bench/metrics_multiproc.py --records 20000 --workers 4

Per mode: the gateway's metrics sink (`Metrics.observe`) on `--records` finished requests (a
streamed chat answer with usage, latencies and one failed attempt), in µs a request and what that
is a chunk of a 64-chunk stream; then one `/metrics` render with `--workers` processes' files
present (multiprocess) or the one registry, in ms. Writes the table to stdout and, with
`--out`, to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(records: int, workers: int) -> dict[str, float]:
    """In this process (the mode already chosen by the environment): time observe and render."""
    from gateway.config import Config
    from gateway.ledger.metrics import Metrics
    from gateway.ledger.record import Attempt, Record

    cfg = Config.model_validate(
        {
            "upstreams": [
                {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "q"}
                for n in ("a", "b")
            ],
            "models": {"m": {"upstreams": ["a", "b"]}},
        }
    )
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics = Metrics(cfg, multiproc_dir=folder)
    rec = Record(
        request_id="r",
        door="chat",
        model="m",
        stream=True,
        time=time.time(),
        key_id="k",
        upstream="b",
        attempts=[Attempt("a", "connect_error", None, 0.01), Attempt("b", "ok", 200, 0.5)],
        status=200,
        finish_reason="stop",
        prompt_tokens=120,
        completion_tokens=64,
        queue_s=0.001,
        ttft_s=0.2,
        ttfa_s=0.2,
        e2e_s=6.5,
        itl_mean_s=0.1,
        chunks=64,
    )
    for _ in range(200):  # the children are made on first use
        metrics.observe(rec)
    t0 = time.perf_counter()
    for _ in range(records):
        metrics.observe(rec)
    observe_us = (time.perf_counter() - t0) / records * 1e6
    renders = []
    for _ in range(5):
        t0 = time.perf_counter()
        body, _ = metrics.render()
        renders.append(time.perf_counter() - t0)
    return {
        "observe_us": observe_us,
        "per_chunk_us": observe_us / 64,
        "render_ms": sorted(renders)[2] * 1e3,
        "body_kb": len(body) / 1024,
        "files": len(os.listdir(folder)) if folder else 0,
    }


def run_mode(multiprocess: bool, records: int, workers: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    with tempfile.TemporaryDirectory(prefix="plumbline-prom-") as folder:
        if multiprocess:
            env["PROMETHEUS_MULTIPROC_DIR"] = folder
            # The other workers' files: the same observations from `workers - 1` more processes.
            for _ in range(workers - 1):
                subprocess.run(
                    [sys.executable, __file__, "--child", "--records", "200"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--records", str(records)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.records, args.workers)))
        return
    lines = [
        "| mode | observe µs/request | µs per chunk (64) | /metrics render ms | body KB | files |",
        "|---|---|---|---|---|---|",
    ]
    for multiprocess in (False, True, False, True)[: 2 * max(1, args.repeat // 2 + 1)]:
        r = run_mode(multiprocess, args.records, args.workers)
        name = f"multiprocess, {args.workers} workers' files" if multiprocess else "one process"
        lines.append(
            f"| {name} | {r['observe_us']:.1f} | {r['per_chunk_us']:.2f} | {r['render_ms']:.1f} "
            f"| {r['body_kb']:.0f} | {r['files']:.0f} |"
        )
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
