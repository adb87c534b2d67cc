"""The load generator behind ``plumbline bench``: named workload shapes against any OpenAI base URL.

One run is a (target, shape, concurrency) triple. For each run it

1. builds ``prompts_per_slot × concurrency`` prompts (plus warm-up prompts) of exactly the shape's
   token counts, using the target's tokenizer endpoint when it has one (vLLM ``POST /tokenize``,
   llama-cpp-python ``POST /extras/tokenize/count``, llama.cpp ``POST /tokenize``) and an
   approximation (one token per common English word) when it has none — the row says which;
2. words are drawn from a seeded generator unique to the run, so the engine's prefix cache only
   helps with the shape's declared shared prefix;
3. sends the warm-up requests, then the measured ones, never more than ``concurrency`` at once,
   over one aiohttp session whose connection pool is sized to the concurrency. Streams are read
   as bytes; only the usage chunk is JSON-decoded. ``ignore_eos`` and ``min_tokens`` (vLLM
   extensions) keep output lengths at the shape's count;
4. reduces the samples to a `Row`: req/s, input/output tok/s, TTFT / TPOT / ITL / E2E at p50 and
   p99, errors. Rows are appended to a TSV with fixed columns and shown in a rich table.

Clock: ``time.perf_counter``. TTFT is time to the first event carrying text; TPOT is
(last token − first token) / (completion tokens − 1); ITL is the gap between token events.
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import time
from array import array
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import astuple, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import aiohttp
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class Shape:
    """A workload shape: a shared prefix (tokens), then unique input, then output tokens."""

    name: str
    input: int
    output: int
    prefix: int = 0

    def __post_init__(self) -> None:
        if self.input < 1 or self.output < 1 or self.prefix < 0:
            raise ValueError(f"shape {self.name!r}: input and output must be >= 1, prefix >= 0")


SHAPES: Mapping[str, Shape] = {
    "router": Shape("router", 1024, 128),
    "promptopt": Shape("promptopt", 512, 256, prefix=3072),
    "judge": Shape("judge", 4096, 512),
    "short": Shape("short", 256, 64),
    "rollout": Shape("rollout", 8192, 2048),
}

_CUSTOM_SHAPE = re.compile(r"^(?:(\d+)\+)?(\d+)/(\d+)$")


def parse_shape(text: str) -> Shape:
    """A named shape (``router``) or a custom one (``IN/OUT`` or ``PREFIX+IN/OUT``)."""
    text = text.strip()
    if text in SHAPES:
        return SHAPES[text]
    match = _CUSTOM_SHAPE.match(text)
    if not match:
        names = ", ".join(SHAPES)
        raise ValueError(f"unknown shape {text!r}: use one of {names}, IN/OUT or PREFIX+IN/OUT")
    prefix, inp, out = match.groups()
    return Shape(text, int(inp), int(out), int(prefix or 0))


def parse_concurrencies(text: str) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]``; every level must be at least 1."""
    levels = [int(part) for part in text.split(",") if part.strip()]
    if not levels or min(levels) < 1:
        raise ValueError(f"concurrency list {text!r} must hold integers >= 1")
    return levels


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible base URL (ending in ``/v1``) and the model name to send it."""

    label: str
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        """The server root, where vLLM and llama.cpp expose their tokenizer endpoints."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


def parse_target(text: str, model: str, api_key: str | None = None) -> Target:
    """``URL`` or ``LABEL=URL``; the label defaults to the URL's host and port."""
    label, sep, url = text.partition("=")
    if not sep:
        label, url = "", text
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"target {text!r} is not an http(s) URL")
    return Target(label or url.split("//", 1)[1].split("/", 1)[0], url.rstrip("/"), model, api_key)


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


@dataclass(frozen=True)
class Row:
    """One (target, shape, concurrency) result; field order is the TSV's column order."""

    timestamp: str
    target: str
    base_url: str
    model: str
    shape: str
    prefix_tokens: int
    input_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    errors: int
    duration_s: float
    req_per_s: float
    in_tok_per_s: float
    out_tok_per_s: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    tokenizer: str  # vllm | llama-cpp-python | llamacpp | approx (one token per word assumed)
    prompt_fit: str  # exact, or "N off" when N prompts missed their token count
    ignore_eos: bool
    seed: int
    first_error: str


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Row))


# --- prompts ------------------------------------------------------------------------------------

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
    session: aiohttp.ClientSession, root: str, model: str, endpoint: Endpoint
) -> Tokenizer:
    """Probe `root` for a tokenizer endpoint; fall back to the approximation.

    Chat prompts count exactly only on vLLM (its ``/tokenize`` applies the chat template).
    """

    def probe(kind: str, path: str, body: Callable[[str], dict], read: Callable[[dict], int]):
        async def count(text: str) -> int:
            async with session.post(root + path, json=body(text)) as resp:
                resp.raise_for_status()
                return read(await resp.json(content_type=None))

        return kind, count

    def vllm_body(text: str) -> dict:
        if endpoint == "chat":
            messages = [{"role": "user", "content": text}]
            return {"model": model, "messages": messages, "add_generation_prompt": True}
        return {"model": model, "prompt": text}

    candidates = [probe("vllm", "/tokenize", vllm_body, lambda j: int(j["count"]))]
    if endpoint == "completions":
        candidates += [
            probe(
                "llama-cpp-python",
                "/extras/tokenize/count",
                lambda t: {"model": model, "input": t},
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


# --- one streamed request -----------------------------------------------------------------------

_EVENT_SPLIT = re.compile(rb"\r?\n\r?\n")
# An event carries output when one of these fields holds a non-empty string, or it has tool calls.
_HAS_TEXT = re.compile(
    rb'"(?:text|content|reasoning_content|reasoning)":\s*"[^"]|"tool_calls":\s*\[\{'
)
_USAGE = re.compile(rb'"usage":\s*\{')


@dataclass
class Sample:
    """What one request measured; times are ``perf_counter`` seconds."""

    start: float
    end: float = 0.0
    first: float = 0.0
    last: float = 0.0
    events: int = 0  # events that carried text
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    gaps: array = field(default_factory=lambda: array("d"))


def _read_events(sample: Sample, events: list[bytes], now: float) -> bool:
    """Account `events` arriving at `now`; True once ``[DONE]`` is seen."""
    for event in events:
        if not event.startswith(b"data:"):
            continue
        if event.startswith(b"[DONE]", 5 + (event[5:6] == b" ")):
            return True
        if _USAGE.search(event):
            usage = orjson.loads(event[5:])["usage"]
            sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            sample.completion_tokens = int(usage.get("completion_tokens") or 0)
        if _HAS_TEXT.search(event):
            if sample.events:
                sample.gaps.append(now - sample.last)
            else:
                sample.first = now
            sample.last = now
            sample.events += 1
    return False


async def stream_one(
    session: aiohttp.ClientSession, url: str, payload: bytes, headers: Mapping[str, str]
) -> Sample:
    """POST one streaming request and time it; errors are recorded, never raised."""
    sample = Sample(start=time.perf_counter())
    done = False
    try:
        async with session.post(url, data=payload, headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.content.read(200)).decode(errors="replace")
                sample.error = f"HTTP {resp.status}: {body}".strip()
            else:
                pending = b""
                async for chunk in resp.content.iter_any():
                    parts = _EVENT_SPLIT.split(pending + chunk)
                    pending = parts.pop()
                    done = _read_events(sample, parts, time.perf_counter()) or done
                if not done:
                    done = _read_events(sample, [pending], time.perf_counter())
                if not done:
                    sample.error = "stream ended without [DONE]"
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError) as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
    sample.end = time.perf_counter()
    if not sample.error and not sample.events:
        sample.error = "no tokens streamed"
    return sample


def request_body(
    target: Target, shape: Shape, prompt: str, endpoint: Endpoint, ignore_eos: bool
) -> bytes:
    """The JSON body (bytes) of one streaming request."""
    body: dict = {
        "model": target.model,
        "max_tokens": shape.output,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": shape.output}
    return orjson.dumps(body)


# --- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0–100) by linear interpolation; NaN when `values` is empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarise(run: RunInfo, samples: Sequence[Sample]) -> Row:
    """Reduce one run's measured samples to its row."""
    ok = [s for s in samples if not s.error]
    errors = [s for s in samples if s.error]
    duration = (max(s.end for s in samples) - min(s.start for s in samples)) if samples else 0.0
    prompt = [s.prompt_tokens or run.shape.prefix + run.shape.input for s in ok]
    completion = [s.completion_tokens or s.events for s in ok]
    tpot = [(s.last - s.first) / (c - 1) for s, c in zip(ok, completion, strict=True) if c > 1]
    gaps = array("d")
    for s in ok:
        gaps.extend(s.gaps)

    def rate(x: float) -> float:
        return round(x / duration, 3) if duration > 0 else 0.0

    def ms(values: Sequence[float], q: float) -> float:
        return round(percentile(values, q) * 1000, 3)

    ttft = [s.first - s.start for s in ok]
    e2e = [s.end - s.start for s in ok]
    return Row(
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        target=run.target.label,
        base_url=run.target.base_url,
        model=run.target.model,
        shape=run.shape.name,
        prefix_tokens=run.shape.prefix,
        input_tokens=run.shape.input,
        output_tokens=run.shape.output,
        concurrency=run.concurrency,
        requests=len(samples),
        errors=len(errors),
        duration_s=round(duration, 3),
        req_per_s=rate(len(ok)),
        in_tok_per_s=rate(sum(prompt)),
        out_tok_per_s=rate(sum(completion)),
        mean_prompt_tokens=round(sum(prompt) / len(ok), 1) if ok else 0.0,
        mean_completion_tokens=round(sum(completion) / len(ok), 1) if ok else 0.0,
        ttft_p50_ms=ms(ttft, 50),
        ttft_p99_ms=ms(ttft, 99),
        tpot_p50_ms=ms(tpot, 50),
        tpot_p99_ms=ms(tpot, 99),
        itl_p50_ms=ms(gaps, 50),
        itl_p99_ms=ms(gaps, 99),
        e2e_p50_ms=ms(e2e, 50),
        e2e_p99_ms=ms(e2e, 99),
        tokenizer=run.tokenizer,
        prompt_fit="exact" if run.misses == 0 else f"{run.misses} off",
        ignore_eos=run.ignore_eos,
        seed=run.seed,
        first_error=errors[0].error[:200].replace("\t", " ").replace("\n", " ") if errors else "",
    )


# --- output -------------------------------------------------------------------------------------


def append_tsv(path: Path, rows: Sequence[Row]) -> None:
    """Append `rows` to `path`, writing the header when the file is new or empty.

    Raises ValueError when an existing file's header is not `COLUMNS` (the columns are fixed).
    """
    header = "\t".join(COLUMNS)
    exists = path.exists() and path.stat().st_size > 0
    if exists:
        with path.open(encoding="utf-8") as fh:
            found = fh.readline().rstrip("\n")
        if found != header:
            raise ValueError(f"{path} has different columns; write to a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        if not exists:
            fh.write(header + "\n")
        for row in rows:
            fh.write("\t".join(str(value) for value in astuple(row)) + "\n")


def table(rows: Sequence[Row]) -> Table:
    """A rich table of the headline columns."""
    out = Table(title="plumbline bench")
    heads = ["target", "shape", "C", "req/s", "in tok/s", "out tok/s", "TTFT p50/p99 ms"]
    for head in heads + ["TPOT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "errors", "tok"]:
        out.add_column(head, justify="left" if head in ("target", "shape", "tok") else "right")
    for r in rows:
        out.add_row(
            r.target,
            r.shape,
            str(r.concurrency),
            f"{r.req_per_s:,.2f}",
            f"{r.in_tok_per_s:,.0f}",
            f"{r.out_tok_per_s:,.0f}",
            f"{r.ttft_p50_ms:,.0f} / {r.ttft_p99_ms:,.0f}",
            f"{r.tpot_p50_ms:,.1f} / {r.tpot_p99_ms:,.1f}",
            f"{r.itl_p50_ms:,.1f} / {r.itl_p99_ms:,.1f}",
            f"{r.e2e_p50_ms:,.0f} / {r.e2e_p99_ms:,.0f}",
            f"{r.errors}/{r.requests}",
            r.tokenizer if r.prompt_fit == "exact" else f"{r.tokenizer} ({r.prompt_fit})",
        )
    return out


# --- runs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """The fixed facts of one run, carried into its row."""

    target: Target
    shape: Shape
    concurrency: int
    tokenizer: str
    misses: int
    ignore_eos: bool
    seed: int


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


def bench_main(
    target: Sequence[str],
    model: str,
    shape: Sequence[str] = ("router",),
    concurrency: str = "1,8,32",
    api_key_env: str | None = None,
    environ: Mapping[str, str] | None = None,
    prompts_per_slot: int = 8,
    warmup: int | None = None,
    tsv: str | None = "bench.tsv",
    seed: int | None = None,
    ignore_eos: bool = True,
    endpoint: Endpoint = "completions",
    tokenizer_url: str | None = None,
    timeout_s: float = 600.0,
    console: Console | None = None,
) -> list[Row]:
    """The ``plumbline bench`` command: parse options, run with a live display, print the table.

    `api_key_env` names the variable holding the key; its value is looked up in `environ`
    (the CLI passes ``os.environ``).
    """
    key = (environ or {}).get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise ValueError(f"environment variable {api_key_env} is not set")
    config = BenchConfig(
        targets=[parse_target(t, model, key) for t in target],
        shapes=[parse_shape(s) for s in shape],
        concurrencies=parse_concurrencies(concurrency),
        prompts_per_slot=prompts_per_slot,
        warmup=warmup,
        tsv=Path(tsv) if tsv else None,
        seed=seed,
        ignore_eos=ignore_eos,
        endpoint=endpoint,
        tokenizer_url=tokenizer_url,
        timeout_s=timeout_s,
    )
    console = console or Console()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        rows = run_bench(config, progress)
    console.print(table(rows))
    for row in rows:
        if row.tokenizer == "approx":
            console.print(f"[yellow]{row.target}: no tokenizer endpoint; token counts approximate")
    return rows
