"""Micro-benchmark of the stream tap: CPU per event for typical vLLM-shaped streams.

    python bench/tap_speed.py            # gateway.serving.tap
    python bench/tap_speed.py OTHER.py   # another copy of tap.py, for before/after comparisons

Feeds a 256-token chat stream (role chunk, content chunks, finish chunk, usage chunk) through
`StreamTap` one event per block, 16 and 64 events per block, with the client asking for usage and
not, and prints microseconds per event (best of 5).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import time
from pathlib import Path

import orjson

from gateway.ledger.record import Record


def load_tap(path: str | None):
    if path is None:
        import gateway.serving.tap as tap

        return tap
    spec = importlib.util.spec_from_file_location("tap_under_test", Path(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def events(n: int = 256, stream: int = 1) -> list[bytes]:
    head = {"id": f"chatcmpl-{stream}", "object": "chat.completion.chunk", "created": 1}
    head["model"] = "m"
    out = [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
    ]
    for i in range(n):
        out.append(
            {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": f" tok{i}"},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        )
    out[-1]["choices"][0]["finish_reason"] = "length"
    out.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3},
        }
    )
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in out] + [b"data: [DONE]\n\n"]


def run(tap, blocks: list[bytes], wants_usage: bool) -> float:
    record = Record(request_id="r", door="chat", model="m", stream=True)
    t = tap.StreamTap(record, client_wants_usage=wants_usage, split_think=False)
    start = time.perf_counter()
    for block in blocks:
        t.feed(block)
    t.finish()
    return time.perf_counter() - start


def main() -> None:
    tap = load_tap(sys.argv[1] if len(sys.argv) > 1 else None)
    streams = itertools.count()
    n = len(events())
    for per_block in (1, 16, 64, 256):

        def blocks(per_block: int = per_block) -> list[bytes]:
            # Every stream its own id, as in life (nothing learnt from one stream fits the next).
            evs = events(stream=next(streams))
            return [b"".join(evs[i : i + per_block]) for i in range(0, len(evs), per_block)]

        for wants in (True, False):
            best = min(min(run(tap, blocks(), wants) for _ in range(20)) for _ in range(5))
            print(
                f"{per_block:3d} event(s)/block, client usage={wants!s:5}: "
                f"{1e6 * best / n:6.2f} µs/event"
            )


if __name__ == "__main__":
    main()
