"""The benchmark's load: a cheap aiohttp client that drives one scenario and tallies what came back.

Cheap on purpose: the client shares two cores with the proxy it measures, so it reads stream
blocks as bytes and counts events (``data: {``) without parsing them. A scenario either loops
(each of `concurrency` workers sends requests back to back for a fixed time) or sends each
worker's request once (the "seed scale" burst of thousands of paced streams).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp


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
    """What one scenario measured on one target."""

    requests: int = 0
    chunks: int = 0
    errors: int = 0
    first_error: str = ""
    latency: list[float] = field(default_factory=list)
    first_chunk: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    def fail(self, reason: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or reason[:160]


def percentile(values: list[float], q: int) -> float:
    """The `q`-th percentile (1–99) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


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
    timeout: aiohttp.ClientTimeout,
) -> None:
    """One request; a streamed answer counts its events, a whole one counts as one chunk."""
    t0 = time.perf_counter()
    chunks, first = 0, None
    try:
        async with session.post(url, json=payload, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.content.read(160)).decode(errors="replace")
                tally.fail(f"HTTP {resp.status}: {text}")
                return
            if payload["stream"]:
                tail = b""
                async for block in resp.content.iter_any():
                    if first is None:
                        first = time.perf_counter() - t0
                    chunks += (tail + block).count(b"data: {") - tail.count(b"data: {")
                    tail = block[-8:]
                if b"[DONE]" not in tail:
                    tally.fail("stream ended without [DONE]")
                    return
            else:
                await resp.read()
                chunks = 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.fail(f"{type(exc).__name__}: {exc}")
        return
    tally.requests += 1
    tally.chunks += chunks
    tally.latency.append(time.perf_counter() - t0)
    if first is not None:
        tally.first_chunk.append(first)


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
    headers = dict(headers or {})
    timeout = aiohttp.ClientTimeout(total=scenario.timeout_s)
    connector = aiohttp.TCPConnector(limit=0, force_close=scenario.fresh)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm = {**payload, "max_tokens": 1}
        await asyncio.gather(
            *(one(session, url, warm, headers, Tally(), timeout) for _ in range(warmup))
        )
        tally = Tally()
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            for _ in range(max(scenario.waves, 1)):
                await one(session, url, payload, headers, tally, timeout)
            while not scenario.once and time.perf_counter() < deadline:
                await one(session, url, payload, headers, tally, timeout)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(scenario.concurrency)))
        tally.wall_s = time.perf_counter() - t0
    return tally
