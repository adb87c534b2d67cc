"""The load generator behind ``plumbline bench``: named workload shapes against any OpenAI base URL.

One run is a (target, shape, concurrency) triple in a round (rounds interleave the targets). The
modules, in the order a run uses them:

    shape    the workload shapes (router, promptopt, judge, short, rollout; IN/OUT custom)
    target   the base URL, model and API path measured
    prompt   prompts of exact token counts, via the target's tokenizer endpoint when it has one
    stream   one timed streaming request, read as bytes into a `Sample`
    stats    samples reduced to a `Row` (req/s, tok/s, TTFT / TPOT / ITL / E2E p50 and p99)
    scrape   vLLM's histograms from Prometheus /metrics around a run: server-side means
    report   rows appended to a TSV with fixed columns, and a rich table
    runner   warm-up, then the measured requests at a fixed concurrency, in rounds per cell
    compare  every target against the first, per cell: paired per-round ratios and deltas
    command  the ``plumbline bench`` entry point (`bench_main`)
"""

from plumbline_kit.loadgen.command import bench_main
from plumbline_kit.loadgen.compare import Comparison, Spread, compare, spread, write_compare
from plumbline_kit.loadgen.prompt import (
    WORDS,
    Tokenizer,
    build_prompts,
    detect_tokenizer,
    fit_words,
)
from plumbline_kit.loadgen.report import append_tsv, table
from plumbline_kit.loadgen.runner import BenchConfig, Run, bench, run_bench, schedule
from plumbline_kit.loadgen.scrape import (
    Scraper,
    ServerSide,
    histograms,
    parse_server_metrics,
    server_means,
)
from plumbline_kit.loadgen.shape import SHAPES, Shape, parse_concurrencies, parse_shape
from plumbline_kit.loadgen.stats import COLUMNS, Row, RunInfo, summarise
from plumbline_kit.loadgen.stream import Sample, read_events, request_body, stream_one
from plumbline_kit.loadgen.target import Endpoint, Target, parse_target

__all__ = [
    "COLUMNS",
    "SHAPES",
    "WORDS",
    "BenchConfig",
    "Comparison",
    "Endpoint",
    "Row",
    "Run",
    "RunInfo",
    "Sample",
    "Scraper",
    "ServerSide",
    "Shape",
    "Spread",
    "Target",
    "Tokenizer",
    "append_tsv",
    "bench",
    "bench_main",
    "build_prompts",
    "compare",
    "detect_tokenizer",
    "fit_words",
    "histograms",
    "parse_concurrencies",
    "parse_server_metrics",
    "parse_shape",
    "parse_target",
    "read_events",
    "request_body",
    "run_bench",
    "schedule",
    "server_means",
    "spread",
    "stream_one",
    "summarise",
    "table",
    "write_compare",
]
