"""Micro-benchmark of the stream tap: CPU per event for typical vLLM-shaped streams.

    python bench/tap_speed.py            # gateway.serving.tap
    python bench/tap_speed.py OTHER.py   # another copy of tap.py, for before/after comparisons

Feeds a 256-token chat stream (role chunk, content chunks, finish chunk, usage chunk) through
`StreamTap` one event per block, 16, 64 and 256 events per block, with the client asking for usage
and not, and prints microseconds per event (best of 5); the same for a completions stream (the
GPU bench's); then both with each token's logprobs (five top ones, as vLLM writes them).
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


def _logprobs(token: str, chat: bool) -> dict:
    """A token's logprobs with five top ones, chat's shape or a completion's."""
    top = [(token, -0.15)] + [(f"alt{k}", -1.5 - k) for k in range(4)]
    if not chat:
        return {
            "tokens": [token],
            "token_logprobs": [-0.15],
            "top_logprobs": [dict(top)],
            "text_offset": [0],
        }
    entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
    return {"content": [{**entries[0], "top_logprobs": entries}]}


def events(n: int = 256, stream: int = 1, logprobs: bool = False, chat: bool = True) -> list[bytes]:
    head = {"id": f"chatcmpl-{stream}", "object": "chat.completion.chunk", "created": 1}
    head["model"] = "m"
    if not chat:
        head["object"] = "text_completion"

    def choice(text: str, first: bool = False) -> dict:
        piece = {"delta": {"role": "assistant", "content": text}} if first else {}
        if not first:
            piece = {"delta": {"content": text}} if chat else {"text": text}
        lp = _logprobs(text, chat) if logprobs and not first else None
        return {"index": 0, **piece, "logprobs": lp, "finish_reason": None}

    out = [{**head, "choices": [choice("", first=True)]}] if chat else []
    for i in range(n):
        out.append({**head, "choices": [choice(f" tok{i}")]})
    out[-1]["choices"][0]["finish_reason"] = "length"
    out.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3},
        }
    )
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in out] + [b"data: [DONE]\n\n"]


def run(tap, blocks: list[bytes], wants_usage: bool, chat: bool = True) -> float:
    record = Record(request_id="r", door="chat", model="m", stream=True)
    t = tap.StreamTap(record, client_wants_usage=wants_usage, split_think=False, chat=chat)
    start = time.perf_counter()
    for block in blocks:
        t.feed(block)
    t.finish()
    return time.perf_counter() - start


def main() -> None:
    tap = load_tap(sys.argv[1] if len(sys.argv) > 1 else None)
    streams = itertools.count()
    for logprobs, chat in ((False, True), (False, False), (True, True), (True, False)):
        kind = ("chat" if chat else "completions") + (", logprobs" if logprobs else "")
        n = len(events(logprobs=logprobs, chat=chat))
        for per_block in (1, 16, 64, 256):

            def blocks(
                per_block: int = per_block, logprobs: bool = logprobs, chat: bool = chat
            ) -> list[bytes]:
                # Every stream its own id, as in life (nothing learnt from one fits the next).
                evs = events(stream=next(streams), logprobs=logprobs, chat=chat)
                return [b"".join(evs[i : i + per_block]) for i in range(0, len(evs), per_block)]

            for wants in (True, False):
                best = min(
                    min(run(tap, blocks(), wants, chat) for _ in range(20)) for _ in range(5)
                )
                print(
                    f"{kind:22} {per_block:3d} event(s)/block, client usage={wants!s:5}: "
                    f"{1e6 * best / n:6.2f} µs/event"
                )


if __name__ == "__main__":
    main()
