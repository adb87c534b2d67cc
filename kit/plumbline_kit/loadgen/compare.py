"""Targets compared with the first one (the baseline), cell by cell, over paired rounds.

A cell is a (shape, concurrency). In every round each target ran that cell once, back to back,
so a round's rows form a pair with the baseline's row of the same round: per round, the ratio of
output tok/s (target / baseline) and the difference of TTFT p50 (target − baseline, ms). Over
the rounds: the median, the range (min–max) and, from 3 rounds on, a t-based 95% interval of the
mean of the per-round values (`scipy.stats.t`). Pairing within a round is what removes drift:
two runs minutes apart differ by more than 1% on a real GPU, two runs back to back much less.

A comparison meets a goal (``min_ratio``, ``max_ttft_delta_ms``) when the whole interval is on
the right side of it, misses when the whole interval is on the wrong side (or the target had
errors), and is unclear otherwise — a median alone never decides.

On a real GPU even back-to-back runs drift: vLLM's own mean inter-token latency moved by a
quarter between two of them on the issue-20 H200 (bench/README.md), far more than the 1% asked
of a relay. With vLLM's histograms scraped around every run (`--server-metrics`) the relay's own
share is compared too, with vLLM's change of speed divided out: per round, the tok/s ratio times
the ratio of vLLM's mean end-to-end latency (target / baseline: how much of the client's time
vLLM spent on the requests, through the target against straight), and the added TTFT, the
client's mean TTFT less vLLM's mean TTFT, target less baseline. `relay_verdict` judges those
against the same goals.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from rich.table import Table
from scipy.stats import t as student_t

from plumbline_kit.loadgen.stats import Row


@dataclass(frozen=True)
class Spread:
    """Per-round values reduced: median, range, and the 95% interval of the mean (NaN < 3)."""

    n: int
    median: float
    low: float
    high: float
    ci_low: float
    ci_high: float


def spread(values: Sequence[float]) -> Spread:
    """`values` (NaN dropped) as a `Spread`; the interval is mean ± t(0.975, n−1) · s / √n."""
    xs = [v for v in values if not math.isnan(v)]
    if not xs:
        return Spread(0, *[math.nan] * 5)
    ci_low = ci_high = math.nan
    if len(xs) >= 3:
        mean = statistics.fmean(xs)
        half = float(student_t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / math.sqrt(len(xs))
        ci_low, ci_high = mean - half, mean + half
    return Spread(len(xs), statistics.median(xs), min(xs), max(xs), ci_low, ci_high)


@dataclass(frozen=True)
class Comparison:
    """One non-baseline target against the baseline on one cell."""

    shape: str
    concurrency: int
    target: str
    baseline: str
    rounds: int
    out_tok_ratio: Spread
    ttft_p50_delta_ms: Spread
    srv_itl_ratio: float  # median over rounds of server-side mean ITL, target / baseline
    srv_ttft_delta_ms: float  # median over rounds of server-side mean TTFT, target − baseline
    errors: int  # the target's, over all rounds
    requests: int
    verdict: str  # met | missed | unclear | "" (no goals, or fewer than 3 paired rounds)
    # vLLM's drift divided out (the module docstring): NaN spreads without server metrics.
    relay_ratio: Spread = Spread(0, *[math.nan] * 5)
    added_ttft_ms: Spread = Spread(0, *[math.nan] * 5)
    relay_verdict: str = ""


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not math.isnan(a) else math.nan


def _client_ttft(row: Row) -> float:
    """The client's mean TTFT, to set beside vLLM's mean; its p50 for a row from before the
    bench kept means."""
    return row.ttft_p50_ms if math.isnan(row.ttft_mean_ms) else row.ttft_mean_ms


def judge(
    c: Comparison,
    min_ratio: float | None,
    max_ttft_delta_ms: float | None,
    relay: bool = False,
) -> str:
    """The verdict against the goals: met, missed or unclear; "" without goals or intervals.
    `relay`: judge the drift-corrected spreads (`relay_ratio`, `added_ttft_ms`) instead."""
    checks: list[str] = []
    ratio, ttft = (
        (c.relay_ratio, c.added_ttft_ms) if relay else (c.out_tok_ratio, c.ttft_p50_delta_ms)
    )
    if min_ratio is not None:
        if math.isnan(ratio.ci_low):
            return ""
        checks.append(
            "met"
            if ratio.ci_low >= min_ratio
            else "missed"
            if ratio.ci_high < min_ratio
            else "unclear"
        )
    if max_ttft_delta_ms is not None:
        if math.isnan(ttft.ci_low):
            return ""
        checks.append(
            "met"
            if ttft.ci_high <= max_ttft_delta_ms
            else "missed"
            if ttft.ci_low > max_ttft_delta_ms
            else "unclear"
        )
    if not checks:
        return ""
    if c.errors or "missed" in checks:
        return "missed"
    return "unclear" if "unclear" in checks else "met"


def compare(
    rows: Sequence[Row],
    baseline: str,
    min_ratio: float | None = None,
    max_ttft_delta_ms: float | None = None,
) -> list[Comparison]:
    """Every non-baseline target against `baseline`, per cell, in the order the rows ran."""
    cells: dict[tuple[str, int], dict[str, dict[int, Row]]] = {}
    for row in rows:
        cell = cells.setdefault((row.shape, row.concurrency), {})
        cell.setdefault(row.target, {})[row.round] = row
    out: list[Comparison] = []
    for (shape, concurrency), by_target in cells.items():
        base = by_target.get(baseline, {})
        for target, rounds in by_target.items():
            if target == baseline:
                continue
            paired = [(rounds[r], base[r]) for r in sorted(rounds) if r in base]
            comparison = Comparison(
                shape=shape,
                concurrency=concurrency,
                target=target,
                baseline=baseline,
                rounds=len(paired),
                out_tok_ratio=spread([_ratio(t.out_tok_per_s, b.out_tok_per_s) for t, b in paired]),
                ttft_p50_delta_ms=spread([t.ttft_p50_ms - b.ttft_p50_ms for t, b in paired]),
                srv_itl_ratio=spread(
                    [_ratio(t.srv_itl_mean_ms, b.srv_itl_mean_ms) for t, b in paired]
                ).median,
                srv_ttft_delta_ms=spread(
                    [t.srv_ttft_mean_ms - b.srv_ttft_mean_ms for t, b in paired]
                ).median,
                errors=sum(r.errors for r in rounds.values()),
                requests=sum(r.requests for r in rounds.values()),
                verdict="",
                relay_ratio=spread(
                    [
                        _ratio(t.out_tok_per_s, b.out_tok_per_s)
                        * _ratio(t.srv_e2e_mean_ms, b.srv_e2e_mean_ms)
                        for t, b in paired
                    ]
                ),
                added_ttft_ms=spread(
                    [
                        (_client_ttft(t) - t.srv_ttft_mean_ms)
                        - (_client_ttft(b) - b.srv_ttft_mean_ms)
                        for t, b in paired
                    ]
                ),
            )
            out.append(
                replace(
                    comparison,
                    verdict=judge(comparison, min_ratio, max_ttft_delta_ms),
                    relay_verdict=judge(comparison, min_ratio, max_ttft_delta_ms, relay=True),
                )
            )
    return out


def _num(x: float, digits: int, signed: bool = False) -> str:
    if math.isnan(x):
        return "—"
    return f"{x:+,.{digits}f}" if signed else f"{x:,.{digits}f}"


def fmt_spread(s: Spread, digits: int, signed: bool = False) -> str:
    """``median [ci_low, ci_high] (low–high)``; the interval left out below 3 rounds."""
    if s.n == 0:
        return "—"
    text = _num(s.median, digits, signed)
    if not math.isnan(s.ci_low):
        text += f" [{_num(s.ci_low, digits, signed)}, {_num(s.ci_high, digits, signed)}]"
    if s.n > 1:
        text += f" ({_num(s.low, digits, signed)}–{_num(s.high, digits, signed)})"
    return text


HEADS = (
    "shape",
    "C",
    "target",
    "vs",
    "rounds",
    "out tok/s ratio",
    "TTFT p50 Δ ms",
    "srv ITL ratio",
    "srv TTFT Δ ms",
    "errors",
    "verdict",
    "tok/s ratio, vLLM drift out",
    "added TTFT ms",
    "relay verdict",
)


def cells_of(c: Comparison) -> list[str]:
    """One comparison as the display cells of `HEADS`."""
    return [
        c.shape,
        str(c.concurrency),
        c.target,
        c.baseline,
        str(c.rounds),
        fmt_spread(c.out_tok_ratio, 4),
        fmt_spread(c.ttft_p50_delta_ms, 2, signed=True),
        _num(c.srv_itl_ratio, 4),
        _num(c.srv_ttft_delta_ms, 2, signed=True),
        f"{c.errors}/{c.requests}",
        c.verdict or "—",
        fmt_spread(c.relay_ratio, 4),
        fmt_spread(c.added_ttft_ms, 2, signed=True),
        c.relay_verdict or "—",
    ]


def compare_table(comparisons: Sequence[Comparison]) -> Table:
    """The comparison as a rich table: median [95% interval] (min–max) over rounds."""
    out = Table(title="against the baseline: median [95% CI of the mean] (min–max) over rounds")
    for head in HEADS:
        out.add_column(head, justify="left" if head in ("shape", "target", "vs") else "right")
    for c in comparisons:
        out.add_row(*cells_of(c))
    return out


TSV_COLUMNS = (
    "timestamp",
    "shape",
    "concurrency",
    "target",
    "baseline",
    "rounds",
    "out_tok_ratio_median",
    "out_tok_ratio_min",
    "out_tok_ratio_max",
    "out_tok_ratio_ci_low",
    "out_tok_ratio_ci_high",
    "ttft_p50_delta_ms_median",
    "ttft_p50_delta_ms_min",
    "ttft_p50_delta_ms_max",
    "ttft_p50_delta_ms_ci_low",
    "ttft_p50_delta_ms_ci_high",
    "srv_itl_ratio_median",
    "srv_ttft_delta_ms_median",
    "errors",
    "requests",
    "verdict",
    "relay_ratio_median",
    "relay_ratio_ci_low",
    "relay_ratio_ci_high",
    "added_ttft_ms_median",
    "added_ttft_ms_ci_low",
    "added_ttft_ms_ci_high",
    "relay_verdict",
)


def write_compare(path: Path, comparisons: Sequence[Comparison]) -> None:
    """Append to `path`: a Markdown table when it ends in ``.md``, else TSV rows (`TSV_COLUMNS`,
    header once; a file with other columns is refused, as the bench TSV is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    if path.suffix == ".md":
        lines = [f"\n### {stamp}\n", "| " + " | ".join(HEADS) + " |"]
        lines.append("|" + "|".join("---" for _ in HEADS) + "|")
        lines += ["| " + " | ".join(cells_of(c)) + " |" for c in comparisons]
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return
    header = "\t".join(TSV_COLUMNS)
    exists = path.exists() and path.stat().st_size > 0
    if exists:
        with path.open(encoding="utf-8") as fh:
            if fh.readline().rstrip("\n") != header:
                raise ValueError(f"{path} has different columns; write to a new file")
    with path.open("a", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        if not exists:
            writer.writerow(TSV_COLUMNS)
        for c in comparisons:
            r, d = c.out_tok_ratio, c.ttft_p50_delta_ms
            writer.writerow(
                [stamp, c.shape, c.concurrency, c.target, c.baseline, c.rounds]
                + [r.median, r.low, r.high, r.ci_low, r.ci_high]
                + [d.median, d.low, d.high, d.ci_low, d.ci_high]
                + [c.srv_itl_ratio, c.srv_ttft_delta_ms, c.errors, c.requests, c.verdict]
                + [c.relay_ratio.median, c.relay_ratio.ci_low, c.relay_ratio.ci_high]
                + [c.added_ttft_ms.median, c.added_ttft_ms.ci_low, c.added_ttft_ms.ci_high]
                + [c.relay_verdict]
            )
