"""Prompts built to exact token counts, with the target's tokenizer endpoint when it has one.

Tokenizer endpoints probed: vLLM ``POST /tokenize``, llama-cpp-python
``POST /extras/tokenize/count``, llama.cpp ``POST /tokenize``; without one, an approximation (one
token per common English word). Words come from a seeded generator unique to the run, so an
engine's prefix cache only helps with the shape's declared shared prefix.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from plumbline_kit.loadgen.shape import Shape
from plumbline_kit.loadgen.target import Endpoint

# Common English words, each one token (with its leading space) in the usual BPE vocabularies.
_WORD_LIST = """
    time year people way day man thing woman life child world school state family student
    group country problem hand part place case week company system program question work
    number night point home water room mother area money story fact month lot right study book
    eye job word business issue side kind head house service friend father power hour game
    line end member law car city name team minute idea kid body back parent face others level
    office door health person art war history party result change morning reason research girl
    guy moment air teacher force order good new first last long great little own other old big
    high different small large next early young important few public bad same able black white
    red blue green run walk talk read write open close bring hold stand turn start show hear
    play move live believe happen provide sit lose pay meet include continue set learn lead
    understand watch follow stop create speak allow add spend grow offer remember love
    consider appear buy wait serve die send expect build stay fall cut reach kill remain
    suggest raise pass sell require report decide pull
"""
WORDS: tuple[str, ...] = tuple(_WORD_LIST.split())


def draw_words(rng: random.Random, n: int) -> list[str]:
    """`n` words drawn uniformly (with replacement) from `WORDS`."""
    return rng.choices(WORDS, k=n)


TokenCount = Callable[[str], Awaitable[int]]


async def fit_words(
    rng: random.Random, count: TokenCount, head: list[str], total: int, overhead: int
) -> tuple[list[str], int]:
    """Words starting with `head` whose text tokenizes to `total` tokens, and the count reached.

    Starts from one token per word plus the tokenizer's `overhead` (BOS), then adds or drops
    tail words by the difference until the count matches (a few tokenizer calls at most).
    """
    words = head + draw_words(rng, max(1, total - overhead - len(head)))
    reached = -1
    for _ in range(8):
        reached = await count(" ".join(words))
        delta = total - reached
        if delta == 0:
            break
        if delta > 0:
            words += draw_words(rng, delta)
        else:
            drop = min(-delta, len(words) - len(head) - 1)
            if drop <= 0:
                break
            del words[-drop:]
    return words, reached


@dataclass(frozen=True)
class Tokenizer:
    """A token counter for one server, or the one-token-per-word approximation."""

    kind: str
    count: TokenCount
    overhead: int  # tokens the server adds around any text (BOS)


async def detect_tokenizer(
    session: aiohttp.ClientSession, root: str, model: str | None, endpoint: Endpoint
) -> Tokenizer:
    """Probe `root` for a tokenizer endpoint; fall back to the approximation.

    Chat prompts count exactly only on vLLM (its ``/tokenize`` applies the chat template).
    `model` None: the server is not asked for a model by name and tokenizes with its own (a
    tokenizer node beside the target, which may serve it under another name).
    """
    named = {} if model is None else {"model": model}

    def probe(kind: str, path: str, body: Callable[[str], dict], read: Callable[[dict], int]):
        async def count(text: str) -> int:
            async with session.post(root + path, json=body(text)) as resp:
                resp.raise_for_status()
                return read(await resp.json(content_type=None))

        return kind, count

    def vllm_body(text: str) -> dict:
        if endpoint == "chat":
            messages = [{"role": "user", "content": text}]
            return {**named, "messages": messages, "add_generation_prompt": True}
        return {**named, "prompt": text}

    candidates = [probe("vllm", "/tokenize", vllm_body, lambda j: int(j["count"]))]
    if endpoint == "completions":
        candidates += [
            probe(
                "llama-cpp-python",
                "/extras/tokenize/count",
                lambda t: {**named, "input": t},
                lambda j: int(j["count"]),
            ),
            probe("llamacpp", "/tokenize", lambda t: {"content": t}, lambda j: len(j["tokens"])),
        ]
    for kind, count in candidates:
        try:
            one = await count("the")
            two = await count("the the")
        except (TimeoutError, aiohttp.ClientError, KeyError, TypeError, ValueError):
            continue
        if two - one == 1:
            return Tokenizer(kind, count, one - 1)

    async def approx(text: str) -> int:
        return text.count(" ") + 1

    return Tokenizer("approx", approx, 0)


async def build_prompts(
    rng: random.Random, tokenizer: Tokenizer, shape: Shape, n: int, parallelism: int
) -> tuple[list[str], int]:
    """`n` prompts of `shape` sharing one fresh prefix, and how many missed their token count."""
    prefix: list[str] = []
    misses = 0
    if shape.prefix:
        prefix, got = await fit_words(rng, tokenizer.count, [], shape.prefix, tokenizer.overhead)
        misses += got != shape.prefix
    total = shape.prefix + shape.input
    seeds = [rng.getrandbits(64) for _ in range(n)]
    gate = asyncio.Semaphore(parallelism)

    async def one(seed: int) -> tuple[str, bool]:
        async with gate:
            words, got = await fit_words(
                random.Random(seed), tokenizer.count, prefix, total, tokenizer.overhead
            )
        return " ".join(words), got == total

    built = await asyncio.gather(*(one(seed) for seed in seeds))
    return [text for text, _ in built], misses + sum(not ok for _, ok in built)
