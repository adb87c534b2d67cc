"""What one streamed request costs the gateway before its first byte and after its last, in the
long-prompt shape: `/v1/completions` with a long prompt (`--words`, 1024 by default: one token a
word for the fake), `--tokens` out, streamed with `include_usage`.

    python bench/request_cost.py --target plumbline --concurrency 1 --seconds 6
    python bench/request_cost.py --target floor-wire --concurrency 32 --seconds 6
    python bench/request_cost.py --target plumbline --concurrency 32 --spy
    python bench/request_cost.py --target floor-late --prefill-ms 20

Starts the fake upstream (paced at `--pace` tokens/s; with `--prefill-ms` its head goes at once
and its first token that much later, as an engine's do) and the target (`plumbline serve`, the
bare relay `bench/floor_proxy.py --wire`, the same holding its head until the first block
(`floor-late`, as the gateway does), or `direct`: the fake alone) as `bench/relay_profile.py`
does, sends each of `--concurrency` workers' requests back to back, each with a prompt of its
own (64 drawn up front), and prints the target's CPU per stream and TTFT (the first data event)
p50/p90. `--spy` samples the target with py-spy and prints the top functions on the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import MODEL, cpu_seconds, fake_upstream, floor, plumbline, set_fake_default  # noqa: E402
from relay_profile import Spy  # noqa: E402

# One token a word, for the fake (and for the usual BPE vocabularies, with the leading space).
WORDS = (
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
)


async def one(
    session: aiohttp.ClientSession, url: str, data: bytes, headers: dict[str, str], out: dict
) -> None:
    t0 = time.perf_counter()
    first = None
    tail = b""
    async with session.post(url, data=data, headers=headers) as resp:
        if resp.status != 200:
            out["errors"] += 1
            out["first_error"] = out.get("first_error") or (await resp.read())[:200]
            return
        async for block in resp.content.iter_any():
            if first is None and b"data: {" in block:
                first = time.perf_counter() - t0
            tail = (tail + block)[-16:]
    if b"[DONE]" not in tail or first is None:
        out["errors"] += 1
        return
    out["ttft"].append(first)
    out["e2e"].append(time.perf_counter() - t0)


async def drive(
    url: str, headers: dict[str, str], bodies: list[bytes], concurrency: int, seconds: float
) -> dict:
    headers = {**headers, "Content-Type": "application/json"}
    out: dict = {"errors": 0, "ttft": [], "e2e": []}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def worker(i: int) -> None:
            n = i
            while time.perf_counter() < deadline:
                await one(session, url, bodies[n % len(bodies)], headers, out)
                n += concurrency

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return out


def bodies_of(words: int, tokens: int, n: int = 64) -> list[bytes]:
    rng = random.Random(20)
    return [
        orjson.dumps(
            {
                "model": MODEL,
                "prompt": " ".join(rng.choices(WORDS, k=words)),
                "max_tokens": tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        for _ in range(n)
    ]


async def run(args: argparse.Namespace, workdir: Path) -> None:
    fake = fake_upstream(workdir)
    if args.target == "direct":
        gw = fake
    elif args.target in ("floor-wire", "floor-late"):
        gw = floor(fake, workdir, wire=True, late_head=args.target == "floor-late")
    else:
        gw = plumbline(fake, workdir, record=args.store)
    try:
        behaviour = {"tokens": args.tokens, "pace_tps": args.pace or None}
        if args.prefill_ms:  # an engine's head at once, its first token after the prefill
            behaviour |= {"hang_after_chunks": 0, "hang": args.prefill_ms / 1000}
        set_fake_default(fake, behaviour)
        url = gw.base_url + "/completions"
        bodies = bodies_of(args.words, args.tokens)
        await drive(url, gw.headers, bodies, 4, 1.0)  # warm-up: connections, first records
        spy = None
        if args.spy:
            spy = Spy(gw.pid, args.seconds, 200, workdir / "profile.txt")
            await asyncio.sleep(0.5)
        cpu0 = cpu_seconds(gw.pid)
        t0 = time.perf_counter()
        out = await drive(url, gw.headers, bodies, args.concurrency, args.seconds)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(gw.pid) - cpu0
        n = max(1, len(out["ttft"]))
        ttft = sorted(out["ttft"])
        print(
            f"{args.target} C{args.concurrency} words={args.words} tokens={args.tokens} "
            f"pace={args.pace}: {len(ttft)} streams in {wall:.1f} s, {out['errors']} errors; "
            f"CPU {cpu:.2f} s = {1e6 * cpu / n:.0f} µs/stream; TTFT p50 "
            f"{1e3 * statistics.median(ttft):.3f} ms p90 {1e3 * ttft[int(0.9 * len(ttft))]:.3f} "
            f"ms; e2e p50 {1e3 * statistics.median(out['e2e']):.2f} ms"
        )
        if out["errors"]:
            print("first error:", out.get("first_error"))
        if spy is not None:
            spy.report(args.top, 10, args.keep)
    finally:
        if gw is not fake:
            gw.stop()
        fake.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--target", choices=("plumbline", "floor-wire", "floor-late", "direct"), default="plumbline"
    )
    ap.add_argument("--store", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--words", type=int, default=1024, help="prompt words (tokens, for the fake)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--pace", type=float, default=430.0, help="tokens/s per stream (0: unpaced)")
    ap.add_argument(
        "--prefill-ms",
        type=float,
        default=0.0,
        help="the fake sends its head at once and its first token this much later, as an "
        "engine does (0: both at once)",
    )
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--spy", action="store_true")
    ap.add_argument("--keep", type=Path, help="copy py-spy's raw samples here")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="plumbline-cost-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
