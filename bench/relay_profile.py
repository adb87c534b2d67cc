"""Where a relayed chunk's CPU goes, by the shape of the output (realistic text, logprobs, one
event per read) and with the record store on or off.

    python bench/relay_profile.py tap                       # the stream tap alone, in process
    python bench/relay_profile.py gateway --text realistic --logprobs --pace 400 --seconds 8
    python bench/relay_profile.py gateway --text realistic --no-store --spy

`tap` feeds the fake upstream's own rendered streams (`plumbline_kit.fakes.answer.stream_template`,
256 tokens) through `StreamTap`, whole streams cut into blocks of 1, 16 and 256 events, and
prints µs per event and which path each event took (`feed`'s own check of a one-event block,
the block check, the run match, the one shaped event, or the event path that parses the
JSON). `gateway` starts the fake and ``plumbline serve`` (as bench/gateway_perf.py does;
`--target floor-wire` the bare relay, `direct` the fake alone), drives `--concurrency` streams
of `--tokens` tokens (`--pace`: each token its own write, so one event per read, as vLLM sends
them; `--door completions`: /v1/completions streams, as the GPU bench sends) and prints the
target's CPU per chunk (and its user part: the kernel's socket work is the same for every
relay) and per stream; `--spy` samples it with py-spy (the venv's, `--rate` a second) and
prints the top functions (as bench/gateway_profile.py does), by line and by thread; `--attach`
runs another tool on it for the run (``--attach "strace -c -f -p {pid}"``, ``perf record ...
-p {pid}``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_profile import _function, top  # noqa: E402
from perf_procs import (  # noqa: E402
    MODEL,
    _stat,
    cpu_seconds,
    fake_upstream,
    floor,
    plumbline,
    set_fake_default,
    tree,
)

from plumbline_kit.loadgen.scenario import Scenario, drive  # noqa: E402

TOKENS = 256


def _stream(text: str, logprobs: bool, rid: str) -> list[bytes]:
    """The fake's events for one 256-token chat stream (usage chunk and [DONE] included)."""
    from plumbline_kit.fakes.answer import stream_template, usage_event, usage_of

    try:
        from plumbline_kit.fakes.plan import make_plan
    except ImportError:  # before the fake's plan had its own module
        from plumbline_kit.fakes.answer import make_plan  # type: ignore[attr-defined,no-redef]

    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "max_tokens": TOKENS}
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 5}
    beh = {"tokens": TOKENS, "realistic": text == "realistic"}
    plan = make_plan("chat", body, beh, MODEL)
    tpl = stream_template(plan, 1_700_000_000)
    events = [rid.encode().join(ev) for ev in tpl.events]
    events.append(usage_event(plan, 1_700_000_000, rid, usage_of(plan, 3, beh)))
    return [*events, b"data: [DONE]\n\n"]


def _tap_run(events: list[bytes], per_block: int, wants_usage: bool) -> tuple[float, dict]:
    from gateway.ledger.record import Record
    from gateway.serving.tap import StreamTap

    record = Record(request_id="r", door="chat", model=MODEL, stream=True)
    tap = StreamTap(record, client_wants_usage=wants_usage, split_think=False, model=MODEL)
    paths: collections.Counter[str] = collections.Counter()
    for name in ("_event", "_shaped", "_block", "_plain"):
        method = getattr(tap, name, None)
        if method is None:  # the tap's paths are named otherwise here
            continue

        def counted(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
            out = _m(*a, **k)
            paths[_n + ("" if out is not None else ":miss")] += 1
            return out

        setattr(tap, name, counted)
    blocks = [b"".join(events[i : i + per_block]) for i in range(0, len(events), per_block)]
    for block in blocks:
        tried, hits = sum(paths.values()), getattr(tap, "_hits", 0)
        tap.feed(block)
        if sum(paths.values()) == tried and getattr(tap, "_hits", 0) > hits:
            paths["feed"] += 1  # the one shaped event `feed` takes itself
    tap.finish()
    # Timed again without the counting wrappers.
    best = float("inf")
    for _ in range(5):
        record = Record(request_id="r", door="chat", model=MODEL, stream=True)
        tap = StreamTap(record, client_wants_usage=wants_usage, split_think=False, model=MODEL)
        t0 = time.perf_counter()
        for block in blocks:
            tap.feed(block)
        tap.finish()
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best / len(events), dict(paths)


def tap_main() -> None:
    n = 0
    for text, logprobs in (("plain", False), ("realistic", False), ("realistic", True)):
        for per_block in (1, 16, 256):
            n += 1
            events = _stream(text, logprobs, f"s{n}")
            us, paths = _tap_run(events, per_block, wants_usage=True)
            size = sum(map(len, events)) // len(events)
            print(
                f"{text:9} logprobs={logprobs!s:5} {per_block:3d}/block ({size} B/event): "
                f"{us:6.2f} µs/event  paths {paths}"
            )


def lines(raw: Path, n: int) -> str:
    """The `n` source lines with the most own samples (where a C call's time lands)."""
    own: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and "Runner.run " in stack:
            samples += int(count)
            own[stack.split(";")[-1]] += int(count)
    out = ["-- own, by line --"]
    return "\n".join(out + [f"{100 * c / samples:5.1f}%  {f}" for f, c in own.most_common(n)])


def threads(raw: Path, n: int) -> str:
    """Samples per thread, and the top own functions off the event loop (the store's writer,
    the watchdog): their Python holds the GIL the loop needs."""
    per: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        name = frames[0] + (" (event loop)" if "Runner.run " in stack else "")
        per[name] += int(count)
        if "Runner.run " not in stack:
            own[_function(frames[-1])] += int(count)
    out = ["-- samples per thread --"] + [f"{c:6d}  {t}" for t, c in per.most_common()]
    out += ["-- own, off the event loop --"] + [f"{c:6d}  {f}" for f, c in own.most_common(n)]
    return "\n".join(out)


def user_seconds(pid: int) -> float:
    """User CPU seconds of `pid`'s live process tree: the Python (and C) above the kernel's
    socket work, which the bare relay pays alike for the same reads and writes."""
    ticks = sum(int(f[11]) for p in tree(pid) if (f := _stat(p)))
    return ticks / os.sysconf("SC_CLK_TCK")


def _py_spy() -> str:
    """py-spy on PATH, else the one installed beside this interpreter (the venv's)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or str(beside)


class Spy:
    """py-spy recording one process (all its threads, raw stacks) for `seconds`, started
    at once; `report` waits for it and prints the top functions, lines and threads."""

    def __init__(self, pid: int, seconds: float, rate: int, raw: Path):
        self.raw = raw
        argv = [_py_spy(), "record", "-p", str(pid), "-d", str(int(seconds) + 1), "-r", str(rate)]
        argv += ["--nonblocking", "--threads", "--format", "raw", "-o", str(raw)]
        self.recorder = subprocess.Popen(argv, stdout=subprocess.DEVNULL)

    def report(self, n: int, n_threads: int, keep: Path | None = None) -> None:
        self.recorder.wait(60)
        print(top(self.raw, n))
        print(lines(self.raw, n))
        print(threads(self.raw, n_threads))
        if keep:
            keep.write_bytes(self.raw.read_bytes())


async def gateway_run(args: argparse.Namespace, workdir: Path) -> None:
    fake = fake_upstream(workdir)
    if args.target == "direct":
        gw = fake
    elif args.target == "floor-wire":
        gw = floor(fake, workdir, wire=True)
    else:
        gw = plumbline(fake, workdir, record=args.store)
    try:
        set_fake_default(
            fake,
            {
                "tokens": args.tokens,
                "pace_tps": args.pace,
                "realistic": True if args.text == "realistic" else None,
            },
        )
        sc = Scenario("relay", args.concurrency, True, args.tokens, args.pace, door=args.door)
        extra: dict[str, object] | None = None
        if args.logprobs:  # five top ones, as each API asks for them
            completions = args.door == "completions"
            extra = {"logprobs": 5} if completions else {"logprobs": True, "top_logprobs": 5}
        url = gw.base_url + ("/completions" if args.door == "completions" else "/chat/completions")
        spy = None
        if args.spy:
            spy = Spy(gw.pid, args.seconds, args.rate, workdir / "profile.txt")
            await asyncio.sleep(0.5)
        attached = None
        if args.attach:
            argv = [a.replace("{pid}", str(gw.pid)) for a in args.attach.split()]
            attached = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
            await asyncio.sleep(0.5)
        # Warm-up (connections, the first records), then the measured run.
        warm = Scenario("w", 4, True, 8, door=args.door)
        await drive(url, warm, MODEL, 0.5, gw.headers, extra=extra)
        cpu0, user0 = cpu_seconds(gw.pid), user_seconds(gw.pid)
        tally = await drive(url, sc, MODEL, args.seconds, gw.headers, warmup=0, extra=extra)
        cpu, user = cpu_seconds(gw.pid) - cpu0, user_seconds(gw.pid) - user0
        chunks = max(1, tally.chunks)
        print(
            f"{args.target} {args.door} text={args.text} logprobs={args.logprobs} "
            f"pace={args.pace} "
            f"store={args.store} "
            f"C{args.concurrency}: {tally.requests} streams, {tally.chunks} chunks "
            f"({tally.chunks / tally.wall_s:,.0f}/s), {tally.errors} errors, "
            f"gateway CPU {cpu:.2f} s = {1e6 * cpu / chunks:.2f} µs/chunk "
            f"({1e6 * user / chunks:.2f} user), "
            f"{1e6 * cpu / max(1, tally.requests):.0f} µs/stream; "
            f"e2e p50 {1e3 * statistics.median(tally.latency):.2f} ms, "
            f"first chunk p50 {1e3 * statistics.median(tally.first_chunk):.2f} ms"
        )
        if attached is not None:
            attached.send_signal(2)
            print(attached.communicate(timeout=30)[1][-6000:])
        if spy is not None:
            spy.report(args.top, args.top, args.keep)
    finally:
        if gw is not fake:
            gw.stop()
        fake.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    sub.add_parser("tap")
    g = sub.add_parser("gateway")
    g.add_argument("--target", choices=("plumbline", "floor-wire", "direct"), default="plumbline")
    g.add_argument("--door", choices=("chat", "completions"), default="chat")
    g.add_argument("--text", choices=("realistic", "plain"), default="realistic")
    g.add_argument("--logprobs", action=argparse.BooleanOptionalAction, default=False)
    g.add_argument("--store", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--pace", type=float, default=None, help="tokens/s per stream (None: unpaced)")
    g.add_argument("--concurrency", type=int, default=32)
    g.add_argument("--tokens", type=int, default=TOKENS)
    g.add_argument("--seconds", type=float, default=6.0)
    g.add_argument("--spy", action="store_true")
    g.add_argument("--rate", type=int, default=200, help="py-spy's samples a second")
    g.add_argument("--attach", help="run this on the gateway during the run ({pid}: its pid)")
    g.add_argument("--keep", type=Path, help="copy py-spy's raw samples here")
    g.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    if args.mode == "tap":
        tap_main()
        return
    with tempfile.TemporaryDirectory(prefix="plumbline-relay-") as tmp:
        asyncio.run(gateway_run(args, Path(tmp)))


if __name__ == "__main__":
    main()
