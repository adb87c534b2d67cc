"""Under load, records == requests: every request the gateway answered is a row in the store.

    python bench/records_count.py --requests 20000 --concurrency 64

Starts two fake upstreams (one healthy; one that answers 503 to every request) and `plumbline
serve` on SQLite. The mix: streamed and non-streamed chat to the healthy route, and a share of
requests to a route whose only upstream fails (the client gets a 502 — a failure that must be
recorded too). Then the gateway is stopped gracefully (so the record queue flushes) and the rows
are counted, per outcome. Prints one JSON line and appends it to bench/results/records.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import MODEL, ROOT, fake_upstream, free_port, launch, set_fake_default  # noqa: E402


def gateway(good: str, bad: str, scratch: Path) -> object:
    port = free_port()
    config = scratch / "records.toml"
    config.write_text(
        f"[server]\nport = {port}\nhealth_interval_s = 0\nretries = 1\nretry_backoff_s = 0\n\n"
        f'[store]\nurl = "sqlite:///{scratch}/records.db"\n\n'
        f'[[upstreams]]\nname = "good"\nkind = "vllm"\nbase_url = "{good}"\nmodel = "{MODEL}"\n\n'
        f'[[upstreams]]\nname = "bad"\nkind = "vllm"\nbase_url = "{bad}"\nmodel = "{MODEL}"\n\n'
        f'[models.ok]\nupstreams = ["good"]\n\n[models.broken]\nupstreams = ["bad"]\n'
    )
    argv = [sys.executable, "-c", "from gateway.cli import app; app()", "serve", "-c", str(config)]
    return launch("plumbline", argv, f"http://127.0.0.1:{port}/v1", scratch)


async def drive(url: str, n: int, concurrency: int, fail_share: float, seed: int) -> Counter:
    rng = random.Random(seed)
    plan = []
    for _ in range(n):
        roll = rng.random()
        model = "broken" if roll < fail_share else "ok"
        plan.append((model, rng.random() < 0.5))
    statuses: Counter = Counter()
    queue: asyncio.Queue = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                model, stream = queue.get_nowait()
                body = {
                    "model": model,
                    "stream": stream,
                    "messages": [{"role": "user", "content": "count me"}],
                }
                async with session.post(f"{url}/chat/completions", json=body) as resp:
                    await resp.read()
                    statuses[f"{'stream' if stream else 'whole'}:{resp.status}"] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--fail-share", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="plumbline-records-"))
    good, bad = fake_upstream(scratch), None
    try:
        bad = fake_upstream(scratch)
        set_fake_default(good, {"tokens": 16})
        set_fake_default(bad, {"status": 503})
        gw = gateway(good.base_url, bad.base_url, scratch)
        started = time.monotonic()
        statuses = asyncio.run(
            drive(gw.base_url, args.requests, args.concurrency, args.fail_share, args.seed)
        )
        wall = time.monotonic() - started
        gw.stop()  # SIGTERM: graceful shutdown flushes the record queue
    finally:
        good.stop()
        if bad is not None:
            bad.stop()
    db = sqlite3.connect(scratch / "records.db")
    rows = db.execute("SELECT count(*) FROM requests").fetchone()[0]
    by_status = dict(db.execute("SELECT status, count(*) FROM requests GROUP BY status"))
    attempts = db.execute(
        "SELECT count(*) FROM requests WHERE attempts LIKE '%http_503%'"
    ).fetchone()[0]
    result = {
        "requests": args.requests,
        "answered": sum(statuses.values()),
        "rows": rows,
        "records_equal_requests": rows == args.requests,
        "client_statuses": dict(statuses),
        "row_statuses": by_status,
        "rows_with_503_attempts": attempts,
        "wall_s": round(wall, 1),
        "req_per_s": round(args.requests / wall, 1),
        "load_avg_1m": os.getloadavg()[0],
    }
    print(json.dumps(result))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("a") as fh:
        fh.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
