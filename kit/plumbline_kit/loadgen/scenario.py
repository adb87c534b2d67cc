"""The benchmarks' scenarios (``bench/*.py``): one load shape driven against a URL, tallied.

A scenario either loops (each of `concurrency` workers sends requests back to back for a fixed
time) or sends each worker's request once (the "seed scale" burst of thousands of paced streams,
in one or more waves). Every request goes through the load generator's one engine
(`plumbline_kit.loadgen.stream`), which reads a stream's blocks as bytes and JSON-decodes only
its usage chunk: cheap on purpose, as the client shares the machine with the proxy it measures.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

from plumbline_kit.loadgen.stream import Sample, stream_one, whole_one

# The oldest generation's threshold while a load runs: never reached (a full collection is
# considered after this many collections of the middle one).
FULL_COLLECTIONS_HELD = 1_000_000


@dataclass(frozen=True)
class Scenario:
    """One load shape. `pace_tps` is the fake upstream's per-token pacing (None: unpaced).
    `door`: chat requests (`/chat/completions`) or completions (`/completions`, a prompt).
    `waves`: with `once`, each worker sends that many requests back to back (two waves of
    2,048 keep the slots full, as a harness fleet does). `fresh`: a new connection per request
    (no keep-alive), so every request pays the accept and the proxy's upstream connect."""

    name: str
    concurrency: int
    stream: bool
    tokens: int
    pace_tps: float | None = None
    once: bool = False
    timeout_s: float = 120.0  # one request's budget
    door: str = "chat"
    waves: int = 1
    fresh: bool = False


@dataclass
class Tally:
    """What one scenario measured on one target. `chunks`: the answers' JSON data events (a
    whole answer counts one); `first_chunk`: seconds to a stream's first bytes."""

    requests: int = 0
    chunks: int = 0
    errors: int = 0
    first_error: str = ""
    latency: list[float] = field(default_factory=list)
    first_chunk: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    started: float = 0.0  # the load's start, `time.time()` (after the warm-up)

    def fail(self, reason: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or reason[:160]

    def add(self, sample: Sample) -> None:
        """Count one request's sample (an error is counted as one, and nothing else)."""
        if sample.error:
            self.fail(sample.error)
            return
        self.requests += 1
        self.chunks += sample.chunks
        self.latency.append(sample.end - sample.start)
        if sample.first_block:
            self.first_chunk.append(sample.first_block - sample.start)


def body(scenario: Scenario, model: str, extra: Mapping[str, object] | None = None) -> dict:
    """The request every target gets for `scenario` (chat's or a completion's), with `extra`
    fields (logprobs)."""
    out: dict = {"model": model}
    if scenario.door == "completions":
        out["prompt"] = "say something"
    else:
        out["messages"] = [{"role": "user", "content": "say something"}]
    out |= {
        "max_tokens": scenario.tokens,
        "stream": scenario.stream,
        **(extra or {}),
    }
    if scenario.stream:
        out["stream_options"] = {"include_usage": True}
    return out


async def one(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict,
    headers: Mapping[str, str],
    tally: Tally,
) -> None:
    """One request, timed by the engine and counted into `tally`."""
    data = orjson.dumps(payload)
    if payload["stream"]:
        tally.add(await stream_one(session, url, data, headers, need_text=False))
    else:
        tally.add(await whole_one(session, url, data, headers))


async def drive(
    url: str,
    scenario: Scenario,
    model: str,
    seconds: float,
    headers: Mapping[str, str] | None = None,
    warmup: int = 32,
    extra: Mapping[str, object] | None = None,
) -> Tally:
    """Warm up with `warmup` short requests, then run `scenario` against `url`."""
    payload = body(scenario, model, extra)
    headers = {"Content-Type": "application/json", **(headers or {})}
    timeout = aiohttp.ClientTimeout(total=scenario.timeout_s)  # per request
    connector = aiohttp.TCPConnector(limit=0, force_close=scenario.fresh)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        warm = {**payload, "max_tokens": 1}
        await asyncio.gather(*(one(session, url, warm, headers, Tally()) for _ in range(warmup)))
        tally = Tally()
        deadline = 0.0  # set at the load's start, below

        async def worker() -> None:
            for _ in range(max(scenario.waves, 1)):
                await one(session, url, payload, headers, tally)
            while not scenario.once and time.perf_counter() < deadline:
                await one(session, url, payload, headers, tally)

        # The load generator's own full collections happen between loads, not in them: aiohttp
        # leaves reference cycles, and a full collection in a load's first burst (the earlier
        # loads' garbage, then what the burst made) stalled every stream's reading 55-75 ms on
        # 2 cores, counted against whichever target was driven. Young collections go on; what
        # a load leaves in the oldest generation waits for the next load's start.
        gc.collect()
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], FULL_COLLECTIONS_HELD)
        t0 = time.perf_counter()
        deadline = t0 + seconds
        tally.started = time.time()
        try:
            await asyncio.gather(*(worker() for _ in range(scenario.concurrency)))
        finally:
            gc.set_threshold(*thresholds)
        tally.wall_s = time.perf_counter() - t0
    return tally
