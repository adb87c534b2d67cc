"""Where rows go: appended to a TSV with fixed columns, and shown as a rich table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple
from pathlib import Path

from rich.table import Table

from plumbline_kit.loadgen.stats import COLUMNS, Row


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
            older = header.startswith(found + "\t")
            hint = " (an older bench's: fewer columns)" if older else ""
            raise ValueError(f"{path} has different columns{hint}; write to a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        if not exists:
            fh.write(header + "\n")
        for row in rows:
            fh.write("\t".join(str(value) for value in astuple(row)) + "\n")


def _ms3(*values: float) -> str:
    return " / ".join("—" if math.isnan(x) else f"{x:,.1f}" for x in values)


def table(rows: Sequence[Row]) -> Table:
    """A rich table of the headline columns; the round when there are several, and the server
    side (vLLM's histogram means over the measured part) when it was scraped."""
    rounds = any(r.round != 1 for r in rows)
    server = any(r.srv_requests >= 0 for r in rows)
    out = Table(title="plumbline bench")
    heads = ["target", "shape", "C"] + (["round"] if rounds else [])
    heads += ["req/s", "in tok/s", "out tok/s", "TTFT p50/p99 ms"]
    heads += ["TPOT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "errors", "tok"]
    if server:
        heads += ["srv reqs", "srv TTFT/ITL/E2E ms", "srv queue/prefill/decode ms"]
    for head in heads:
        out.add_column(head, justify="left" if head in ("target", "shape", "tok") else "right")
    for r in rows:
        cells = [r.target, r.shape, str(r.concurrency)] + ([str(r.round)] if rounds else [])
        cells += [
            f"{r.req_per_s:,.2f}",
            f"{r.in_tok_per_s:,.0f}",
            f"{r.out_tok_per_s:,.0f}",
            f"{r.ttft_p50_ms:,.0f} / {r.ttft_p99_ms:,.0f}",
            f"{r.tpot_p50_ms:,.1f} / {r.tpot_p99_ms:,.1f}",
            f"{r.itl_p50_ms:,.1f} / {r.itl_p99_ms:,.1f}",
            f"{r.e2e_p50_ms:,.0f} / {r.e2e_p99_ms:,.0f}",
            f"{r.errors}/{r.requests}",
            r.tokenizer if r.prompt_fit == "exact" else f"{r.tokenizer} ({r.prompt_fit})",
        ]
        if server:
            cells += [
                str(r.srv_requests) if r.srv_requests >= 0 else "—",
                _ms3(r.srv_ttft_mean_ms, r.srv_itl_mean_ms, r.srv_e2e_mean_ms),
                _ms3(r.srv_queue_mean_ms, r.srv_prefill_mean_ms, r.srv_decode_mean_ms),
            ]
        out.add_row(*cells)
    return out
