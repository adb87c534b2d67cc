"""Runs: every (target, shape, concurrency) of a `BenchConfig`, warm-up excluded, in rounds.

For each run: build ``prompts_per_slot × concurrency`` prompts plus warm-up prompts, send the
warm-up requests, then the measured ones, never more than ``concurrency`` at once, over one
aiohttp session whose connection pool is sized to the concurrency; reduce the samples to a row.
With server metrics for the target, its ``/metrics`` are read right before and right after the
measured requests (`scrape`).

Order (`schedule`): cell by cell (shape, then concurrency); within a cell, `rounds` rounds, each
running every target once, back to back — forward in odd rounds, reversed in even ones (A B C,
C B A, A B C, …), so a drift in time biases a target's odd and even rounds in opposite
directions instead of always the same way. Every round is a full run: fresh prompts (round 1's
are those of a single-round bench with the same seed), its own warm-up.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp
from rich.progress import Progress

from plumbline_kit.loadgen.prompt import build_prompts, detect_tokenizer
from plumbline_kit.loadgen.report import append_tsv
from plumbline_kit.loadgen.scrape import Scraper, ServerSide, server_means
from plumbline_kit.loadgen.shape import Shape
from plumbline_kit.loadgen.stats import Row, RunInfo, summarise
from plumbline_kit.loadgen.stream import Sample, request_body, stream_one
from plumbline_kit.loadgen.target import Endpoint, Target


@dataclass(frozen=True)
class BenchConfig:
    """What to measure: every shape × concurrency level × round × target (see `schedule`)."""

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
    rounds: int = 1  # runs of every cell per target, interleaved across the targets
    # target label -> Prometheus /metrics URLs of the vLLM server(s) serving it (summed)
    server_metrics: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.targets and self.shapes and self.concurrencies):
            raise ValueError("a bench needs at least one target, shape and concurrency level")
        if self.prompts_per_slot < 1 or (self.warmup is not None and self.warmup < 0):
            raise ValueError("prompts_per_slot must be >= 1 and warmup >= 0")
        if self.rounds < 1:
            raise ValueError("rounds must be >= 1")
        labels = [t.label for t in self.targets]
        if len(set(labels)) != len(labels):
            raise ValueError(f"target labels {labels} repeat; name each target LABEL=URL")
        if unknown := set(self.server_metrics) - set(labels):
            raise ValueError(f"server metrics for unknown targets {sorted(unknown)}")


def schedule(
    targets: Sequence[Target], shapes: Sequence[Shape], concurrencies: Sequence[int], rounds: int
) -> list[tuple[Shape, int, int, Target]]:
    """The runs in order: (shape, concurrency, round, target); targets reversed in even rounds."""
    return [
        (shape, concurrency, r, target)
        for shape in shapes
        for concurrency in concurrencies
        for r in range(1, rounds + 1)
        for target in (targets if r % 2 else list(reversed(targets)))
    ]


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


@dataclass(frozen=True)
class Run:
    """One run of the schedule: a target on a cell, in a round."""

    target: Target
    shape: Shape
    concurrency: int
    round: int = 1


async def run_one(
    config: BenchConfig,
    run: Run,
    seed: int,
    progress: Progress | None,
    scraper: tuple[Scraper, aiohttp.ClientSession] | None = None,
) -> Row:
    """Build the prompts, warm up, measure (scraping around it), summarise one run."""
    target, shape, concurrency = run.target, run.shape, run.concurrency
    measured = config.prompts_per_slot * concurrency
    warmup = concurrency if config.warmup is None else config.warmup
    key = f"{seed}:{target.label}:{shape.name}:{concurrency}"
    rng = random.Random(key if run.round == 1 else f"{key}:{run.round}")
    headers = {"Content-Type": "application/json"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        root = (config.tokenizer_url or target.root).rstrip("/")
        # A tokenizer node is not asked for the target's model name (a gateway's route name
        # is not the node's): it tokenizes with its own model.
        model = None if config.tokenizer_url else target.model
        tokenizer = await detect_tokenizer(session, root, model, config.endpoint)
        label = f"{target.label} {shape.name} C{concurrency}"
        if config.rounds > 1:
            label += f" round {run.round}/{config.rounds}"
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
        samples, server = await scraped(
            scraper,
            drive(session, url, bodies[warmup:], headers, concurrency, tick),
            lambda text: _warn(progress, f"{label}: {text}"),
        )
    info = RunInfo(target, shape, concurrency, tokenizer.kind, misses, config.ignore_eos, seed)
    row = replace(summarise(info, samples), round=run.round, **vars(server))
    if progress is not None and task is not None:
        progress.remove_task(task)
        progress.console.print(
            f"{label}: {row.req_per_s:,.2f} req/s, {row.out_tok_per_s:,.0f} out tok/s, "
            f"TTFT p50 {row.ttft_p50_ms:,.0f} ms, errors {row.errors}/{row.requests}"
        )
    return row


async def scraped(
    scraper: tuple[Scraper, aiohttp.ClientSession] | None,
    measure: Awaitable[list[Sample]],
    warn: Callable[[str], None],
) -> tuple[list[Sample], ServerSide]:
    """Await `measure` between two scrapes; its samples and the server-side row fields (NaN
    where a scrape failed: the failure is passed to `warn`, the run goes on)."""
    if scraper is None:
        return await measure, ServerSide()
    try:
        before = await scraper[0].snapshot(scraper[1])
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        warn(f"server metrics not read before the run ({exc})")
        return await measure, ServerSide()
    samples = await measure
    try:
        return samples, server_means(before, await scraper[0].snapshot(scraper[1]))
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        warn(f"server metrics not read after the run ({exc})")
        return samples, ServerSide()


def _warn(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress.console.print(f"[yellow]{text}")


async def bench(config: BenchConfig, progress: Progress | None = None) -> list[Row]:
    """Run the `schedule`; rows are appended to the TSV as each finishes.

    Every server metrics URL is read once first: one that cannot be read, or holds no vLLM
    histogram, stops the bench before any load is sent.
    """
    seed = config.seed if config.seed is not None else secrets.randbits(48)
    scrapers = {label: Scraper(urls) for label, urls in config.server_metrics.items() if urls}
    rows: list[Row] = []
    async with aiohttp.ClientSession() as scrape_session:
        for scraper in scrapers.values():
            await scraper.probe(scrape_session)
        runs = schedule(config.targets, config.shapes, config.concurrencies, config.rounds)
        for shape, concurrency, round_, target in runs:
            found = scrapers.get(target.label)
            row = await run_one(
                config,
                Run(target, shape, concurrency, round_),
                seed,
                progress,
                (found, scrape_session) if found else None,
            )
            if config.tsv is not None:
                append_tsv(config.tsv, [row])
            rows.append(row)
    return rows


def run_bench(config: BenchConfig, progress: Progress | None = None) -> list[Row]:
    """Synchronous entry: `bench` in a fresh event loop."""
    return asyncio.run(bench(config, progress))
