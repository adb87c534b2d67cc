"""Hostile clients: what the gateway does with idle, slowloris, huge-header, non-reading and
flooding clients (the connection limits of docs/limits.md), on loopback.

The gateway runs in its own process as `plumbline serve` runs it (`uvicorn --factory
gateway.edge.app:app_from_env`, uvloop, one worker), with short limits from its config so the
run is short, and a low open-files limit (`--open-files`, soft and hard) so the flood reaches
it; the upstream is an endless stream served here, which notes when its connection is closed.
`--http httptools` runs uvicorn's plain protocol instead, as the gateway ran before its
limits: the figures to compare. Every probe has a deadline; the run stops by itself.

Probes, one after another:
- idle: `--idle` connections that send nothing; when the gateway closes each.
- slowloris: `--slow` connections that send a request head a header line a second.
- huge header: one head of `--huge-mib` MiB, sent as fast as the gateway takes it.
- non-reader: one streamed chat request whose client reads 100 bytes and no more; when the
  upstream's connection is closed.
- flood: `--flood` connections at once, each asking GET /health; what each got.
During each: the gateway's RSS (highest sample) and /health's latency (a fresh connection
every 0.25 s). Written to bench/results/<date>-hostile-clients-<protocol>.json.

    python bench/hostile_clients.py                  # the gateway's protocol
    python bench/hostile_clients.py --http httptools # uvicorn's own, for comparison
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.launch import gateway_command  # noqa: E402
from tests.harness import free_port  # noqa: E402

LIMITS = {
    "header_timeout_s": 2.0,
    "keepalive_timeout_s": 3.0,
    "body_timeout_s": 3.0,
    "send_timeout_s": 3.0,
    "max_header_bytes": 65536,
    "max_connections": 4096,
}
EVENT = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
    b'"delta":{"content":"' + b"x" * 16000 + b'"},"finish_reason":null}]}\n\n'
)


class Upstream:
    """An endless streaming upstream: when each of its connections was closed."""

    def __init__(self) -> None:
        self.closed_at: list[float] = []

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(20_000):  # 320 MB, for a reader that keeps up
                writer.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
                await writer.drain()
        except (ConnectionError, OSError):
            self.closed_at.append(time.monotonic())
        writer.close()


def _config(upstream: str, port: int) -> str:
    server = "\n".join(f"{k} = {v}" for k, v in LIMITS.items())
    return f"""[server]
host = "127.0.0.1"
port = {port}
health_interval_s = 0
retries = 0
{server}

[store]
enabled = false

[[upstreams]]
name = "endless"
kind = "vllm"
base_url = "{upstream}"
model = "m"

[models.smol]
upstreams = ["endless"]
"""


@contextlib.contextmanager
def gateway(upstream: str, folder: Path, http: str, open_files: int) -> Iterator[Any]:
    port = free_port()
    (folder / "config.toml").write_text(_config(upstream, port))
    argv = gateway_command(port)
    if http != "bounded":
        argv[argv.index("--http") + 1] = http
    env = {**os.environ, "PLUMBLINE_CONFIG": str(folder / "config.toml")}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    log = (folder / "gateway.log").open("wb")
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("gateway did not start") from None
                time.sleep(0.2)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Watch:
    """The gateway's RSS and /health's latency, sampled while a probe runs."""

    def __init__(self, port: int, pid: int) -> None:
        self.port, self.process = port, psutil.Process(pid)
        self.rss: list[float] = []
        self.health: list[float] = []
        self.answers: Counter[str] = Counter()

    async def _health(self) -> None:
        start = time.monotonic()
        try:
            async with asyncio.timeout(5):
                r, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.write(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                answer = await r.read()
                w.close()
            self.answers[answer[9:12].decode(errors="replace") or "closed"] += 1
        except (TimeoutError, OSError) as e:
            self.answers[type(e).__name__] += 1
        self.health.append(time.monotonic() - start)

    async def run(self) -> None:
        while True:
            self.rss.append(self.process.memory_info().rss / 2**20)
            await self._health()
            await asyncio.sleep(0.25)

    def figures(self) -> dict[str, Any]:
        h = sorted(self.health) or [0.0]
        return {
            "rss_max_mib": round(max(self.rss or [0]), 1),
            "health_p50_ms": round(statistics.median(h) * 1000, 1),
            "health_max_ms": round(h[-1] * 1000, 1),
            "health_answers": dict(self.answers),
        }


async def _closed_within(
    reader: asyncio.StreamReader, deadline: float
) -> tuple[float | None, bytes]:
    """Seconds until the gateway closed the connection (None: still open at the deadline),
    and what it sent."""
    start, got = time.monotonic(), b""
    try:
        async with asyncio.timeout(deadline):
            while chunk := await reader.read(65536):
                got += chunk
    except TimeoutError:
        return None, got
    except OSError:
        pass
    return round(time.monotonic() - start, 2), got


def _closes(results: list[tuple[float | None, bytes]]) -> dict[str, Any]:
    times = sorted(t for t, _ in results if t is not None)
    return {
        "connections": len(results),
        "closed": len(times),
        "still_open_at_deadline": len(results) - len(times),
        "closed_after_s_median": statistics.median(times) if times else None,
        "closed_after_s_max": times[-1] if times else None,
        "answers": dict(Counter(g[:12].decode(errors="replace") or "nothing" for _, g in results)),
    }


async def idle(port: int, n: int, deadline: float) -> dict[str, Any]:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]
    results = await asyncio.gather(*(_closed_within(r, deadline) for r, _ in conns))
    for _, w in conns:
        w.close()
    return _closes(list(results))


async def slowloris(port: int, n: int, deadline: float) -> dict[str, Any]:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]

    async def drip(w: asyncio.StreamWriter) -> None:
        w.write(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        with contextlib.suppress(OSError):
            for i in range(int(deadline) + 1):
                await asyncio.sleep(1)
                w.write(b"x-drip-%d: y\r\n" % i)
                await w.drain()

    drips = [asyncio.create_task(drip(w)) for _, w in conns]
    results = await asyncio.gather(*(_closed_within(r, deadline) for r, _ in conns))
    for task in drips:
        task.cancel()
    for _, w in conns:
        w.close()
    return _closes(list(results))


async def huge_header(port: int, mib: int, deadline: float) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start, sent, piece = time.monotonic(), 0, b"a" * 2**20
    writer.write(b"GET /health HTTP/1.1\r\nhost: x\r\nx-huge: ")
    try:
        async with asyncio.timeout(deadline):
            while sent < mib * 2**20:
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
    except (TimeoutError, OSError):
        pass
    closed, got = await _closed_within(reader, max(deadline - (time.monotonic() - start), 1))
    writer.close()
    return {
        "header_mib_asked": mib,
        "mib_taken_before_close": round(sent / 2**20, 1),
        "closed_after_s": round(time.monotonic() - start, 2) if closed is not None else None,
        "answer": got[:12].decode(errors="replace") or "nothing",
    }


async def non_reader(port: int, upstream: Upstream, deadline: float) -> dict[str, Any]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    body = b'{"model":"smol","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    head = await reader.read(100)
    start, before = time.monotonic(), len(upstream.closed_at)
    while len(upstream.closed_at) == before and time.monotonic() - start < deadline:
        await asyncio.sleep(0.1)
    released = len(upstream.closed_at) > before
    writer.transport.abort()
    return {
        "answer": head[:12].decode(errors="replace"),
        "upstream_released": released,
        "upstream_closed_after_s": round(upstream.closed_at[-1] - start, 2) if released else None,
    }


async def flood(port: int, n: int, deadline: float) -> dict[str, Any]:
    async def one() -> tuple[str, asyncio.StreamWriter | None]:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError as e:
            return f"connect failed ({type(e).__name__})", None
        try:
            w.write(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            async with asyncio.timeout(deadline):
                got = await r.read(12)
        except TimeoutError:
            return "no answer by the deadline", w
        except OSError as e:
            return f"reset ({type(e).__name__})", w
        return (got.decode(errors="replace") or "closed, no answer"), w

    outcomes = await asyncio.gather(*(one() for _ in range(n)))  # all held open together
    for _, w in outcomes:
        if w is not None:
            w.close()
    return {"connections": n, "outcomes": dict(Counter(o for o, _ in outcomes))}


async def probe(
    name: str, port: int, pid: int, run: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    watch = Watch(port, pid)
    task = asyncio.create_task(watch.run())
    print(f"{name}...", flush=True)
    result = await run()
    await asyncio.sleep(0.5)
    task.cancel()
    return {**result, **watch.figures()}


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    upstream = Upstream()
    server = await asyncio.start_server(upstream.answer, "127.0.0.1", 0)
    up_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    out: dict[str, Any] = {"http": args.http, "open_files": args.open_files, "limits": LIMITS}
    with gateway(up_url, folder, args.http, args.open_files) as (port, proc):
        out["rss_start_mib"] = round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1)
        d = args.deadline
        out["idle"] = await probe("idle", port, proc.pid, lambda: idle(port, args.idle, d))
        out["slowloris"] = await probe(
            "slowloris", port, proc.pid, lambda: slowloris(port, args.slow, d)
        )
        out["huge_header"] = await probe(
            "huge header", port, proc.pid, lambda: huge_header(port, args.huge_mib, d)
        )
        out["non_reader"] = await probe(
            "non-reader", port, proc.pid, lambda: non_reader(port, upstream, d)
        )
        out["flood"] = await probe("flood", port, proc.pid, lambda: flood(port, args.flood, d))
        out["gateway_alive_at_end"] = proc.poll() is None
    server.close()
    lines = (folder / "gateway.log").read_text(errors="replace").splitlines()
    out["gateway_log_lines"] = len(lines)
    out["gateway_log_sample"] = lines[:12]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--http", default="bounded", help="bounded (the gateway's), or httptools")
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--slow", type=int, default=300)
    ap.add_argument("--huge-mib", type=int, default=150)
    ap.add_argument("--flood", type=int, default=1500)
    ap.add_argument("--open-files", type=int, default=1024)
    ap.add_argument("--deadline", type=float, default=20.0, help="seconds a probe waits at most")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this client's own connections
    with tempfile.TemporaryDirectory(prefix="plumbline-hostile-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    name = "boundedhttp" if args.http == "bounded" else args.http
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    out = args.out or ROOT / "bench" / "results" / f"{today}-hostile-clients-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
