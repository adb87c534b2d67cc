"""One run's samples reduced to a `Row`: rates, TTFT / TPOT / ITL / E2E percentiles, errors.

TPOT is (last token − first token) / (completion tokens − 1). The field order of `Row` is the
TSV's column order; columns added later are appended at the end (round, then the server side).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from gateway.ledger.percentile import percentile
from plumbline_kit.loadgen.shape import Shape
from plumbline_kit.loadgen.stream import Sample
from plumbline_kit.loadgen.target import Target


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
    round: int = 1  # 1..rounds; with several targets, every round visits each target once
    # Server side (scrape.py): requests the server finished during the measured part (-1:
    # not scraped) and vLLM's histogram means over it, NaN where not scraped or absent.
    srv_requests: int = -1
    srv_ttft_mean_ms: float = math.nan
    srv_itl_mean_ms: float = math.nan
    srv_e2e_mean_ms: float = math.nan
    srv_queue_mean_ms: float = math.nan
    srv_prefill_mean_ms: float = math.nan
    srv_decode_mean_ms: float = math.nan
    # The client's means, to set beside vLLM's (compare.py's added TTFT takes like for like).
    ttft_mean_ms: float = math.nan
    e2e_mean_ms: float = math.nan


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Row))


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

    def mean_ms(values: Sequence[float]) -> float:
        return round(sum(values) / len(values) * 1000, 3) if values else math.nan

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
        ttft_p50_ms=ms(ttft, 0.50),
        ttft_p99_ms=ms(ttft, 0.99),
        tpot_p50_ms=ms(tpot, 0.50),
        tpot_p99_ms=ms(tpot, 0.99),
        itl_p50_ms=ms(gaps, 0.50),
        itl_p99_ms=ms(gaps, 0.99),
        e2e_p50_ms=ms(e2e, 0.50),
        e2e_p99_ms=ms(e2e, 0.99),
        tokenizer=run.tokenizer,
        prompt_fit="exact" if run.misses == 0 else f"{run.misses} off",
        ignore_eos=run.ignore_eos,
        seed=run.seed,
        first_error=errors[0].error[:200].replace("\t", " ").replace("\n", " ") if errors else "",
        ttft_mean_ms=mean_ms(ttft),
        e2e_mean_ms=mean_ms(e2e),
    )
