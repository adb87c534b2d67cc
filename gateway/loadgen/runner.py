"""Runs: every (target, shape, concurrency) of a `BenchConfig`, warm-up excluded.

For each run: build ``prompts_per_slot × concurrency`` prompts plus warm-up prompts, send the
warm-up requests, then the measured ones, never more than ``concurrency`` at once, over one
aiohttp session whose connection pool is sized to the concurrency; reduce the samples to a row.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from rich.progress import Progress

from gateway.loadgen.prompt import build_prompts, detect_tokenizer
from gateway.loadgen.report import append_tsv
from gateway.loadgen.shape import Shape
from gateway.loadgen.stats import Row, RunInfo, summarise
from gateway.loadgen.stream import Sample, request_body, stream_one
from gateway.loadgen.target import Endpoint, Target


@dataclass(frozen=True)
class BenchConfig:
    """What to measure: every target × shape × concurrency level, in that order."""

    targets: Sequence[Target]
    shapes: Sequence[Shape]
    concurrencies: Sequence[int]
    prompts_per_slot: int = 8  # the measured requests are this many times the concurrency
    warmup: int | None = None  # warm-up requests per run; None means one per slot
    tsv: Path | None = None
    seed: int | None = None  # None draws a fresh seed per bench
    ignore_eos: bool = True
    endpoint: Endpoint = "completions"
    tokenizer_url: str | None = None  # a node root to tokenize with when the target has none
    timeout_s: float = 600.0
    prepare_parallelism: int = 8  # tokenizer calls in flight while building prompts

    def __post_init__(self) -> None:
        if not (self.targets and self.shapes and self.concurrencies):
            raise ValueError("a bench needs at least one target, shape and concurrency level")
        if self.prompts_per_slot < 1 or (self.warmup is not None and self.warmup < 0):
            raise ValueError("prompts_per_slot must be >= 1 and warmup >= 0")


async def drive(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Sequence[bytes],
    headers: Mapping[str, str],
    concurrency: int,
    tick: Callable[[Sample], None],
) -> list[Sample]:
    """Send `bodies` with at most `concurrency` in flight; samples in completion order."""
    queue = iter(bodies)
    samples: list[Sample] = []

    async def worker() -> None:
        for body in queue:
            sample = await stream_one(session, url, body, headers)
            samples.append(sample)
            tick(sample)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
    return samples


async def run_one(
    config: BenchConfig,
    target: Target,
    shape: Shape,
    concurrency: int,
    seed: int,
    progress: Progress | None,
) -> Row:
    """Build the prompts, warm up, measure, summarise one (target, shape, concurrency)."""
    measured = config.prompts_per_slot * concurrency
    warmup = concurrency if config.warmup is None else config.warmup
    rng = random.Random(f"{seed}:{target.label}:{shape.name}:{concurrency}")
    headers = {"Content-Type": "application/json"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        root = (config.tokenizer_url or target.root).rstrip("/")
        tokenizer = await detect_tokenizer(session, root, target.model, config.endpoint)
        label = f"{target.label} {shape.name} C{concurrency}"
        task = progress.add_task(f"{label} prompts", total=None) if progress else None
        prompts, misses = await build_prompts(
            rng, tokenizer, shape, warmup + measured, config.prepare_parallelism
        )
        bodies = [
            request_body(target, shape, p, config.endpoint, config.ignore_eos) for p in prompts
        ]
        path = "/chat/completions" if config.endpoint == "chat" else "/completions"
        url = target.base_url + path
        failures = 0

        def tick(sample: Sample) -> None:
            nonlocal failures
            failures += bool(sample.error)
            if progress is not None and task is not None:
                progress.update(task, advance=1, description=f"{label} errors={failures}")

        if progress is not None and task is not None:
            progress.update(task, total=warmup, completed=0, description=f"{label} warm-up")
        await drive(session, url, bodies[:warmup], headers, concurrency, lambda s: None)
        failures = 0
        if progress is not None and task is not None:
            progress.update(task, total=measured, completed=0, description=label)
        samples = await drive(session, url, bodies[warmup:], headers, concurrency, tick)
    info = RunInfo(target, shape, concurrency, tokenizer.kind, misses, config.ignore_eos, seed)
    row = summarise(info, samples)
    if progress is not None and task is not None:
        progress.remove_task(task)
        progress.console.print(
            f"{label}: {row.req_per_s:,.2f} req/s, {row.out_tok_per_s:,.0f} out tok/s, "
            f"TTFT p50 {row.ttft_p50_ms:,.0f} ms, errors {row.errors}/{row.requests}"
        )
    return row


async def bench(config: BenchConfig, progress: Progress | None = None) -> list[Row]:
    """Run every target × shape × concurrency; rows are appended to the TSV as each finishes."""
    seed = config.seed if config.seed is not None else secrets.randbits(48)
    rows: list[Row] = []
    for target in config.targets:
        for shape in config.shapes:
            for concurrency in config.concurrencies:
                row = await run_one(config, target, shape, concurrency, seed, progress)
                if config.tsv is not None:
                    append_tsv(config.tsv, [row])
                rows.append(row)
    return rows


def run_bench(config: BenchConfig, progress: Progress | None = None) -> list[Row]:
    """Synchronous entry: `bench` in a fresh event loop."""
    return asyncio.run(bench(config, progress))
