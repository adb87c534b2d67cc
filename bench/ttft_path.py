"""Where a stream's time to first token goes inside the relay: a timeline of one request at a time.

    python bench/ttft_path.py --target gateway --target gateway-at-once --target floor \
        --target floor-late --requests 200 --out bench/results/ttft_path.md
    python bench/ttft_path.py --upstream http://127.0.0.1:8401/v1 --model smollm2 ...

Each target is served in a process of its own with clock marks patched onto the request path
(the gateway as `plumbline serve` serves it, on the same uvicorn options; the bare relays of
`bench/floor_proxy.py --wire`, with and without the late head), and sent `--requests` streamed
`/v1/completions` one after another (the long-prompt shape: a prompt of `--words` one-token words,
`--tokens` out, `include_usage`). Without `--upstream` the fake upstream serves them, its head at
once and its first token `--prefill-ms` later, as an engine's. Printed per target, as medians over
the requests (the first `--warmup` left out): when each step began, counted from uvicorn reading
the request's bytes until the request is written to the upstream, and from the upstream's first
data event reaching the relay until it is written to the client; and the client's TTFT.

A step's time here is what it costs where it runs, in a process that has waited a prefill since
its last request: code and data gone cold in the caches cost several times what a warm loop of
the same step measures (`bench/request_cost.py`, `bench/relay_path.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The marks, in the order a request passes them; "<" ends a step, ">" begins one.
BEFORE = (
    ("read", "uvicorn reads the request"),
    ("asgi>", "the request's task starts"),
    ("guard>", "access guard"),
    ("edge>", "edge handler"),
    ("validate>", "validation"),
    ("call_of>", "route, profile, record"),
    ("open>", "dispatch"),
    ("plan>", "routing plan"),
    ("request>", "upstream body (adapt)"),
    ("write", "request written to the upstream"),
    ("sent<", "deferred work done (while the upstream works)"),
    ("head", "upstream head in"),
    ("client_head", "head to the client"),
)
AFTER = (
    ("event", "upstream's first data event in"),
    ("client_head", "head to the client"),
    ("client_first", "first event to the client"),
    ("open<", "dispatch returns (first event checked)"),
)


# -- the served side -----------------------------------------------------------------------------
MARKS: list[tuple[str, int]] = []


def mark(name: str) -> None:
    MARKS.append((name, time.perf_counter_ns()))


def _wrap(owner: Any, attr: str, begin: str | None, end: str | None = None) -> None:
    f = getattr(owner, attr)
    if inspect.iscoroutinefunction(f):

        @functools.wraps(f)
        async def timed(*a: Any, **k: Any) -> Any:
            if begin:
                mark(begin)
            try:
                return await f(*a, **k)
            finally:
                if end:
                    mark(end)
    else:

        @functools.wraps(f)
        def timed(*a: Any, **k: Any) -> Any:
            if begin:
                mark(begin)
            try:
                return f(*a, **k)
            finally:
                if end:
                    mark(end)

    setattr(owner, attr, timed)


def instrument() -> None:
    """Marks on uvicorn (the client's side) and on the wire (the upstream's)."""
    from uvicorn.protocols.http import httptools_impl

    received = httptools_impl.HttpToolsProtocol.data_received

    def data_received(self: Any, data: bytes) -> None:
        if data.startswith(b"POST"):
            mark("read")
        received(self, data)

    httptools_impl.HttpToolsProtocol.data_received = data_received  # type: ignore[method-assign]
    respond = httptools_impl.RequestResponseCycle.send

    async def send(self: Any, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            mark("client_head")
        elif b"data: {" in message.get("body", b"")[:64]:
            mark("client_first")
        await respond(self, message)

    httptools_impl.RequestResponseCycle.send = send  # type: ignore[method-assign]
    _wrap(httptools_impl.RequestResponseCycle, "run_asgi", "asgi>")
    instrument_wire()


def instrument_wire() -> None:
    from gateway.serving import wire

    conn_send = wire.Connection.send
    # A gateway from before the work done while the upstream reads (`sent`): nothing to mark.
    hooked = "sent" in inspect.signature(conn_send).parameters

    async def upstream_send(
        self: Any, request: bytes, sent: Callable[[], None] | None = None
    ) -> Any:
        mark("write")

        def after() -> None:
            if sent is not None:
                sent()
            mark("sent<")

        reply = await (conn_send(self, request, after) if hooked else conn_send(self, request))
        mark("head")
        return reply

    wire.Connection.send = upstream_send  # type: ignore[method-assign]
    upstream_bytes = wire.Connection.data_received

    def upstream_received(self: Any, data: bytes) -> None:
        if self.reply is not None and b"data: {" in data[:64]:
            mark("event")
        upstream_bytes(self, data)

    wire.Connection.data_received = upstream_received  # type: ignore[method-assign]


def instrument_gateway() -> None:
    from gateway.edge import fastpath, guard
    from gateway.edge.doors.openai import routes as api
    from gateway.serving import dispatch

    _wrap(guard.AccessGuard, "__call__", "guard>")
    _wrap(fastpath.Edge, "__call__", "edge>")
    _wrap(api, "validate", "validate>")
    _wrap(api, "call_of", "call_of>")
    _wrap(dispatch.Dispatcher, "open", "open>", "open<")
    _wrap(dispatch, "plan", "plan>")
    _wrap(dispatch.Dispatcher, "_request", "request>")


def serve(args: argparse.Namespace) -> None:
    import os

    import uvicorn

    if args.cpus:  # a core of its own: a write to a local socket no longer hands it to the reader
        os.sched_setaffinity(0, args.cpus)

    from deploy.launch import SERVE_OPTIONS, _Server

    instrument()
    if args.floor is not None:
        from floor_proxy import WireFloor

        app: Any = WireFloor(args.upstream, late_head=args.floor == "late")
        options = {**SERVE_OPTIONS, "lifespan": "on"}
    else:
        from gateway.config import load_config
        from gateway.edge.app import create_app

        instrument_gateway()
        app = create_app(load_config(args.config), config_path=args.config, tune_process=True)
        options = SERVE_OPTIONS
    try:
        # uvicorn's own `run` raises the SIGTERM it caught again once stopped, ending the process
        # before the marks are written; the gateway's server does not.
        _Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, **options)).run()
    finally:
        args.marks.write_text(json.dumps(MARKS))


# -- the driving side ----------------------------------------------------------------------------
def config_text(upstream: str, model: str, port: int, head: str, db: Path, store: bool) -> str:
    return (
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nhealth_interval_s = 5\n'
        f"ttft_timeout_s = 120\n\n"
        f'[store]\nurl = "sqlite:///{db}"\nenabled = {"true" if store else "false"}\n\n'
        f'[[upstreams]]\nname = "u0"\nkind = "vllm"\nbase_url = "{upstream}"\n'
        f'model = "{model}"\n\n[models.{json.dumps(model)}]\nupstreams = ["u0"]\n'
        f'stream_head = "{head}"\n'
    )


def start(target: str, args: argparse.Namespace, upstream: str, scratch: Path) -> tuple[Any, Path]:
    from perf_procs import free_port, launch

    port = free_port()
    marks = scratch / f"{target}.marks.json"
    argv = [sys.executable, __file__, "--serve", "--port", str(port), "--marks", str(marks)]
    if args.served_cpus:
        argv += ["--cpus", ",".join(map(str, sorted(args.served_cpus)))]
    if target.startswith("floor"):  # it relays the path as asked: the origin alone
        argv += ["--upstream", upstream.removesuffix("/").removesuffix("/v1")]
        argv += ["--floor", "late" if target == "floor-late" else "at_once"]
    else:
        argv += ["--upstream", upstream]
        config = scratch / f"{target}.toml"
        head = "at_once" if target == "gateway-at-once" else "first_event"
        db = scratch / f"{target}.db"
        config.write_text(config_text(upstream, args.model, port, head, db, args.store))
        argv += ["--config", str(config)]
    return launch(target, argv, f"http://127.0.0.1:{port}/v1", scratch), marks


async def drive(url: str, bodies: list[bytes], n: int) -> list[float]:
    ttft: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        for i in range(n):
            t0 = time.perf_counter()
            first = None
            async with session.post(url, data=bodies[i % len(bodies)], headers=headers) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"{url}: HTTP {resp.status}: {await resp.text()}")
                async for block in resp.content.iter_any():
                    if first is None and b"data: {" in block:
                        first = time.perf_counter() - t0
            if first is None:
                raise RuntimeError(f"{url}: a stream without a data event")
            ttft.append(first)
    return ttft


def timeline(
    marks: list[tuple[str, int]], warmup: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median µs of each mark's first passing after `read` (before) and after `event` (after)."""
    requests: list[dict[str, int]] = []
    for name, ns in marks:
        if name == "read":
            requests.append({})
        if requests:
            requests[-1].setdefault(name, ns)
    requests = [r for r in requests[warmup:] if "event" in r and "client_first" in r]
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    for r in requests:
        for name, ns in r.items():
            if ns <= r["write"] or name in ("sent<", "head", "client_head") and ns < r["event"]:
                before.setdefault(name, []).append((ns - r["read"]) / 1e3)
            if ns >= r["event"]:
                after.setdefault(name, []).append((ns - r["event"]) / 1e3)
    return (
        {k: statistics.median(v) for k, v in before.items()},
        {k: statistics.median(v) for k, v in after.items()},
    )


def table(
    title: str, steps: tuple[tuple[str, str], ...], cells: dict[str, dict[str, float]]
) -> list[str]:
    """One Markdown table: a row per step some target passed, a column per target."""
    lines = ["", title, "", "| step | " + " | ".join(cells) + " |", "|---" * (len(cells) + 1) + "|"]
    for name, label in steps:
        row = [of.get(name) for of in cells.values()]
        if any(c is not None for c in row):
            shown = " | ".join("–" if c is None else f"{c:.0f}" for c in row)
            lines.append(f"| {label} | {shown} |")
    return lines


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    targets = list(results)
    upstream = args.upstream or (
        f"the fake, first token {args.prefill_ms:g} ms after its head, {args.pace:g} tokens/s"
    )
    if args.pin:
        served, _, others = args.pin.partition(":")
        upstream += f"; served on cores {served}, the rest on {others}"
    lines = [
        f"{args.requests} streams one at a time to each target ({args.warmup} left out), "
        f"`/v1/completions`, {args.words}-word prompt, {args.tokens} tokens; upstream "
        f"{upstream}.",
    ]
    lines += table(
        "Median µs from uvicorn reading the request (– where the target has no such step):",
        BEFORE,
        {t: results[t]["before"] for t in targets},
    )
    lines += table(
        "Median µs from the upstream's first data event reaching the relay:",
        AFTER,
        {t: results[t]["after"] for t in targets},
    )
    lines += ["", "| client | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
    for key, label in (("p50", "TTFT p50, ms"), ("mean", "TTFT mean, ms")):
        lines.append(f"| {label} | " + " | ".join(f"{results[t][key]:.3f}" for t in targets) + " |")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace, scratch: Path) -> str:
    from perf_procs import MODEL, fake_upstream, set_fake_default
    from request_cost import bodies_of

    if args.other_cpus:  # this process, and the fake it starts
        import os

        os.sched_setaffinity(0, args.other_cpus)
    fake = None
    upstream = args.upstream
    if upstream is None:
        fake = fake_upstream(scratch)
        set_fake_default(
            fake,
            {
                "tokens": args.tokens,
                "pace_tps": args.pace or None,
                "hang_after_chunks": 0,
                "hang": args.prefill_ms / 1000,
            },
        )
        upstream = fake.base_url
        args.model = MODEL
    bodies = [
        orjson.dumps({**orjson.loads(b), "model": args.model})
        for b in bodies_of(args.words, args.tokens)
    ]
    results: dict[str, dict[str, Any]] = {}
    try:
        for target in args.target:
            proc, marks_path = start(target, args, upstream, scratch)
            try:
                ttft = await drive(proc.base_url + "/completions", bodies, args.requests)
            finally:
                proc.stop()
            before, after = timeline(json.loads(marks_path.read_text()), args.warmup)
            kept = sorted(ttft[args.warmup :])
            results[target] = {
                "before": before,
                "after": after,
                "p50": 1e3 * statistics.median(kept),
                "mean": 1e3 * statistics.fmean(kept),
            }
            print(f"{target}: TTFT p50 {results[target]['p50']:.3f} ms", flush=True)
    finally:
        if fake is not None:
            fake.stop()
    return report(results, args)


def cores(text: str) -> set[int]:
    """`0,2-3` as {0, 2, 3}; empty for an empty text."""
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--target",
        action="append",
        choices=("gateway", "gateway-at-once", "floor", "floor-late"),
        help="repeat for several (default: all four)",
    )
    ap.add_argument("--upstream", help="an OpenAI base URL (default: the fake upstream)")
    ap.add_argument("--model", default="smollm2", help="the upstream's model (with --upstream)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--words", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--prefill-ms", type=float, default=20.0)
    ap.add_argument("--pace", type=float, default=430.0, help="the fake's tokens/s (0: unpaced)")
    ap.add_argument("--store", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", type=Path, help="write the tables here too (Markdown)")
    ap.add_argument(
        "--pin",
        metavar="SERVED:OTHERS",
        help="cores for the served target and for this process and the fake, as lists (1:0, "
        "or 2:3-5): a target sharing its core with the process it writes to is preempted by it",
    )
    # The served side (a process of its own, started by the driving side).
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--marks", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--floor", choices=("at_once", "late"), help=argparse.SUPPRESS)
    ap.add_argument("--cpus", type=cores, help=argparse.SUPPRESS)
    args = ap.parse_args()
    served, _, others = (args.pin or ":").partition(":")
    args.served_cpus, args.other_cpus = cores(served), cores(others)
    if args.serve:
        serve(args)
        return
    args.target = args.target or ["gateway", "gateway-at-once", "floor", "floor-late"]
    with tempfile.TemporaryDirectory(prefix="plumbline-ttft-") as tmp:
        text = asyncio.run(run(args, Path(tmp)))
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
