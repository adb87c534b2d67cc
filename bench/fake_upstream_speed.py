"""Raw speed of the fake upstream (plumbline_kit.fakes.upstream) on loopback: the benchmarks' limit.

Starts the fake in its own process (no request log), drives it with the kit's load generator and
prints, per scenario: req/s, chunks/s, end-to-end and first-chunk latency (p50/p99), errors,
and the fake's CPU time per request and per chunk (from /proc). No assertions; figures only.

    python bench/fake_upstream_speed.py                    # nonstream-c1, nonstream-c64, stream-c32
    python bench/fake_upstream_speed.py --scenario seed    # 2,048 streams paced at 10 tok/s

Scenarios: nonstream-c1 / nonstream-c64 (16-token answers, closed loop for --seconds),
stream-c32 (256-token unpaced streams, closed loop), seed (2,048 concurrent 64-token streams at
10 tok/s, each sent once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from gateway.ledger.percentile import percentile
from plumbline_kit.loadgen.scenario import Scenario, Tally, drive

ROOT = Path(__file__).resolve().parent.parent
MODEL = "fake-model"

SCENARIOS = {
    "nonstream-c1": Scenario("nonstream-c1", 1, False, 16),
    "nonstream-c64": Scenario("nonstream-c64", 64, False, 16),
    "stream-c32": Scenario("stream-c32", 32, True, 256),
    "seed": Scenario("seed", 2048, True, 64, pace_tps=10, once=True),
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_fake() -> tuple[subprocess.Popen, str]:
    """The fake in its own process on a free port; returns it and its base URL."""
    cmd = [sys.executable, "-m", "plumbline_kit.fakes.upstream", "--port", "0", "--no-record"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().rsplit(" ", 1)[1].strip()


async def run(url: str, sc: Scenario, seconds: float) -> tuple[Tally, float]:
    """Drive one scenario after a short warm-up; returns the tally and the wall time."""
    tally = await drive(url, sc, MODEL, seconds, warmup=50)
    return tally, tally.wall_s


async def set_default(base: str, behaviour: dict) -> None:
    async with aiohttp.ClientSession() as s, s.post(f"{base}/_fake/default", json=behaviour) as r:
        r.raise_for_status()


async def wait_healthy(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(100):
            try:
                async with s.get(f"{base}/health") as health:
                    if health.status == 200:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    proc, base = start_fake()
    try:
        await wait_healthy(base)
        print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print(
            f"{'scenario':14} {'req/s':>7} {'chunks/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'1st p50':>8} {'1st p99':>8} {'err':>4} {'cpu/req µs':>10} {'cpu/chunk µs':>12}"
        )
        for name in args.scenario or ["nonstream-c1", "nonstream-c64", "stream-c32"]:
            sc = SCENARIOS[name]
            await set_default(base, {"tokens": sc.tokens, "pace_tps": sc.pace_tps})
            cpu0 = cpu_seconds(proc.pid)
            tally, wall = await run(f"{base}/v1/chat/completions", sc, args.seconds)
            cpu = cpu_seconds(proc.pid) - cpu0
            ms = [
                1e3 * percentile(v, q)
                for v in (tally.latency, tally.first_chunk)
                for q in (0.5, 0.99)
            ]
            per_chunk = cpu / tally.chunks * 1e6 if sc.stream and tally.chunks else 0.0
            print(
                f"{name:14} {tally.requests / wall:7.0f} {tally.chunks / wall:9.0f} "
                f"{ms[0]:8.2f} {ms[1]:8.2f} {ms[2]:8.2f} {ms[3]:8.2f} {tally.errors:4d} "
                f"{cpu / max(tally.requests, 1) * 1e6:10.1f} {per_chunk:12.2f}",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
