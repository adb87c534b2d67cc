"""Raw speed of the fake upstream (gateway/fakes/upstream.py) on loopback: the benchmarks' limit.

Starts the fake in its own process (no request log), drives it with a cheap aiohttp client and
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
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "say something short"}]}


@dataclass(frozen=True)
class Scenario:
    concurrency: int
    stream: bool
    tokens: int
    pace_tps: float | None = None
    once: bool = False  # each worker sends one request instead of looping for --seconds


SCENARIOS = {
    "nonstream-c1": Scenario(1, False, 16),
    "nonstream-c64": Scenario(64, False, 16),
    "stream-c32": Scenario(32, True, 256),
    "seed": Scenario(2048, True, 64, pace_tps=10, once=True),
}


@dataclass
class Tally:
    requests: int = 0
    chunks: int = 0
    errors: int = 0
    latency: list[float] = field(default_factory=list)
    first_chunk: list[float] = field(default_factory=list)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_fake() -> tuple[subprocess.Popen, str]:
    """The fake in its own process on a free port; returns it and its base URL."""
    cmd = [sys.executable, "-m", "gateway.fakes.upstream", "--port", "0", "--no-record"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().rsplit(" ", 1)[1].strip()


async def one(session: aiohttp.ClientSession, url: str, body: dict, tally: Tally) -> None:
    """One request; counts SSE data events as chunks (a non-stream answer is one chunk)."""
    t0 = time.perf_counter()
    chunks, first = 0, None
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}")
            if body.get("stream"):
                async for block in resp.content.iter_any():
                    first = first if first is not None else time.perf_counter() - t0
                    chunks += block.count(b"data: {")
            else:
                await resp.read()
                chunks = 1
    except (aiohttp.ClientError, RuntimeError):
        tally.errors += 1
        return
    tally.requests += 1
    tally.chunks += chunks
    tally.latency.append(time.perf_counter() - t0)
    if first is not None:
        tally.first_chunk.append(first)


async def run(url: str, sc: Scenario, seconds: float) -> tuple[Tally, float]:
    """Drive one scenario after a short warm-up; returns the tally and the wall time."""
    body = {**BODY, "stream": sc.stream, "max_tokens": sc.tokens}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        warm_body = {**body, "max_tokens": 1}
        await asyncio.gather(*(one(session, url, warm_body, Tally()) for _ in range(50)))
        tally = Tally()
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            await one(session, url, body, tally)
            while not sc.once and time.perf_counter() < deadline:
                await one(session, url, body, tally)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(sc.concurrency)))
        return tally, time.perf_counter() - t0


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100)[q - 1]


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
            ms = [1e3 * pct(v, q) for v in (tally.latency, tally.first_chunk) for q in (50, 99)]
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
