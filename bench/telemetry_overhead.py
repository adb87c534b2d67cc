"""What OpenTelemetry tracing costs a request: the gateway with `[telemetry]` off, then on,
exporting every trace to a local OTLP/HTTP receiver (a separate process that reads and counts
each POST /v1/traces), in alternating rounds.

    python bench/telemetry_overhead.py --seconds 8 --rounds 3 --concurrency 8

Starts the fake upstream (`plumbline_kit.fakes.upstream`, 16 tokens an answer, unpaced), the
receiver and one `plumbline serve` per setting (no record store, one worker); each round sends
`--concurrency` workers' requests back to back for `--seconds`, whole answers then streamed ones,
and reports requests/s and the gateway's CPU per request (µs, utime + stime of its process tree over
the requests it served). Prints a Markdown table."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import (  # noqa: E402
    MODEL,
    Proc,
    cpu_seconds,
    fake_upstream,
    free_port,
    launch,
    set_fake_default,
)

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def receiver(scratch: Path) -> Proc:
    port = free_port()
    argv = [sys.executable, "-c", RECEIVER, str(port)]
    return launch("otlp", argv, f"http://127.0.0.1:{port}/v1", scratch, health="/")


def gateway(fake: Proc, scratch: Path, endpoint: str | None) -> Proc:
    port = free_port()
    name = "traced" if endpoint else "untraced"
    config = scratch / f"{name}.toml"
    telemetry = f'\n[telemetry]\nendpoint = "{endpoint}"\nexport_delay_s = 1\n' if endpoint else ""
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nhealth_interval_s = 5\n\n'
        f"[store]\nenabled = false\n\n"
        f'[[upstreams]]\nname = "fake"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
        f'model = "{MODEL}"\n\n[models.{MODEL}]\nupstreams = ["fake"]\n{telemetry}'
    )
    argv = [sys.executable, "-c", "from gateway.cli import app; app()", "serve", "--config"]
    return launch(name, [*argv, str(config)], f"http://127.0.0.1:{port}/v1", scratch)


async def load(url: str, stream: bool, concurrency: int, seconds: float) -> int:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "stream": stream,
    }
    done = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.post(f"{url}/chat/completions", json=body) as resp:
                    await resp.read()
                    assert resp.status == 200, resp.status
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def measure(proc: Proc, stream: bool, args: argparse.Namespace) -> tuple[float, float]:
    """(requests/s, gateway CPU µs per request) of one run."""
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    done = asyncio.run(load(proc.base_url, stream, args.concurrency, args.seconds))
    cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
    return done / wall, cpu / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-telemetry-"))
    procs: list[Proc] = []
    try:
        fake = fake_upstream(scratch)
        procs.append(fake)
        set_fake_default(fake, {"tokens": 16})
        otlp = receiver(scratch)
        procs.append(otlp)
        off = gateway(fake, scratch, None)
        on = gateway(fake, scratch, otlp.base_url + "/traces")
        procs += [off, on]
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for proc in (off, on):  # warm both
            measure(proc, False, argparse.Namespace(concurrency=2, seconds=1.0))
        for _ in range(args.rounds):
            for shape, stream in (("whole", False), ("stream", True)):
                for name, proc in (("off", off), ("on", on)):
                    results.setdefault((shape, name), []).append(measure(proc, stream, args))
        print("| answer | telemetry | requests/s (median) | gateway CPU µs/request (median) |")
        print("|---|---|---|---|")
        for (shape, name), runs in results.items():
            rps = statistics.median(r[0] for r in runs)
            us = statistics.median(r[1] for r in runs)
            print(f"| {shape} | {name} | {rps:.0f} | {us:.0f} |")
    finally:
        for proc in reversed(procs):
            proc.stop()


if __name__ == "__main__":
    main()
