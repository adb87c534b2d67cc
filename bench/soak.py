"""Soak: many concurrent streams through the gateway for minutes, against the paced fake upstream.

The fake upstream and the gateway each run in their own process on loopback (the gateway as
`uvicorn --factory gateway.edge.app:app_from_env`, one worker, with a SQLite store under a temp
folder
when the app factory wires one). An aiohttp client keeps `--streams` streams open in a closed
loop for `--minutes`; each stream must end with `data: [DONE]` and carry no error event.

Reported (stdout and `--out` as JSON): requests, errors (by kind), records (the gateway's
`gateway_requests_total`, i.e. records seen by the metrics sink; and store rows when a store is
wired) against requests, the gateway's RSS at minute 2 and at the end (and every 30 s), its CPU
time, and the client-side stream rate. No assertions: figures for the closing note.

    python bench/soak.py                               # 2,048 streams, 10 minutes
    python bench/soak.py --streams 512 --minutes 2     # the short proof run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.launch import gateway_command  # noqa: E402
from plumbline_kit.fakes.upstream import running_fake  # noqa: E402
from tests.harness import free_port  # noqa: E402

MODEL = "soak"


@dataclass
class Result:
    streams: int
    minutes: float
    tokens: int
    pace_tps: float
    requests: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    records_metrics: int | None = None
    records_store: int | None = None
    rss_mb: dict[str, float] = field(default_factory=dict)  # "t=<s>" -> MB
    rss_min2_mb: float | None = None
    rss_end_mb: float | None = None
    rss_growth_pct: float | None = None
    gateway_cpu_s: float | None = None
    streams_per_s: float = 0.0
    seconds: float = 0.0


def _config_toml(fake_url: str, port: int, folder: Path) -> str:
    return f"""
[server]
host = "127.0.0.1"
port = {port}
health_interval_s = 10
idle_timeout_s = 60

[store]
url = "sqlite:///{folder / "soak.db"}"

[[upstreams]]
name = "fake"
kind = "vllm"
base_url = "{fake_url}"
model = "fake-model"

[models.{MODEL}]
upstreams = ["fake"]
"""


@contextlib.contextmanager
def gateway_process(fake_url: str, folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    config = folder / "config.toml"
    config.write_text(_config_toml(fake_url, port, folder))
    env = {**os.environ, "PLUMBLINE_CONFIG": str(config)}
    log = (folder / "gateway.log").open("wb")
    proc = subprocess.Popen(
        gateway_command(port),  # as `plumbline serve` runs
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                import urllib.request

                urllib.request.urlopen(root + "/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "gateway did not start: " + (folder / "gateway.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.2)
        yield root, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def one_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> str | None:
    """One streamed request read to the end; None when it ended well, else the error kind."""
    try:
        async with session.post(
            url, data=body, headers={"content-type": "application/json"}
        ) as resp:
            if resp.status != 200:
                return f"http_{resp.status}"
            tail = b""
            async for block in resp.content.iter_any():
                if b'"error"' in block:
                    return "error_event"
                tail = (tail + block)[-64:]
            return None if tail.rstrip().endswith(b"data: [DONE]") else "no_done"
    except (TimeoutError, aiohttp.ClientError) as e:
        return type(e).__name__


async def drive(root: str, result: Result, proc: psutil.Process) -> None:
    url = root + "/v1/chat/completions"
    body = json.dumps(
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "soak " * 20}]}
    ).encode()
    errors: Counter[str] = Counter()
    duration = result.minutes * 60
    started = time.monotonic()
    stop_at = started + duration
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < stop_at:
            outcome = await one_stream(session, url, body)
            result.requests += 1
            if outcome is None:
                result.ok += 1
            else:
                errors[outcome] += 1

    async def sampler() -> None:
        marks = sorted({*range(0, int(duration) + 1, 30), 120})
        for mark in marks:
            await asyncio.sleep(max(0.0, started + mark - time.monotonic()))
            if time.monotonic() > stop_at + 1:
                break
            rss = proc.memory_info().rss / 2**20
            result.rss_mb[f"t={mark}"] = round(rss, 1)
            if mark == 120:
                result.rss_min2_mb = round(rss, 1)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sampling = asyncio.create_task(sampler())
        await asyncio.gather(*(worker(session) for _ in range(result.streams)))
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    result.errors = dict(errors)
    result.seconds = round(time.monotonic() - started, 1)
    result.streams_per_s = round(result.requests / result.seconds, 1)


def records_from_metrics(root: str) -> int:
    import urllib.request

    text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    return int(
        sum(
            float(m.group(1))
            for m in re.finditer(r"^gateway_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
        )
    )


def store_rows(folder: Path) -> int | None:
    db = folder / "soak.db"
    if not db.exists():
        return None
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
        except sqlite3.OperationalError:
            return None


def soak(streams: int, minutes: float, tokens: int, pace_tps: float) -> Result:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    result = Result(streams, minutes, tokens, pace_tps)
    with (
        tempfile.TemporaryDirectory(prefix="plumbline-soak-") as tmp,
        running_fake(process=True, record=False, tokens=tokens, pace_tps=pace_tps) as fake,
        gateway_process(fake.base_url, Path(tmp)) as (root, popen),
    ):
        proc = psutil.Process(popen.pid)
        asyncio.run(drive(root, result, proc))
        result.rss_end_mb = round(proc.memory_info().rss / 2**20, 1)
        result.rss_mb["end"] = result.rss_end_mb
        times = proc.cpu_times()
        result.gateway_cpu_s = round(times.user + times.system, 1)
        result.records_metrics = records_from_metrics(root)
        popen.terminate()  # graceful: the record queue (if wired) writes everything on close
        popen.wait(timeout=60)
        result.records_store = store_rows(Path(tmp))
    base = result.rss_min2_mb
    if base:
        result.rss_growth_pct = round(100 * (result.rss_end_mb - base) / base, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2048)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=64, help="answer length per stream")
    parser.add_argument("--pace-tps", type=float, default=20.0, help="upstream tokens per second")
    parser.add_argument("--out", default=str(ROOT / "var" / "soak.json"))
    args = parser.parse_args(argv)
    result = soak(args.streams, args.minutes, args.tokens, args.pace_tps)
    text = json.dumps(
        {"command": "python bench/soak.py " + " ".join(argv or sys.argv[1:]), **asdict(result)},
        indent=2,
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
