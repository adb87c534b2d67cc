"""Gateway performance: our gateway, LiteLLM's proxy and vllm-router against the fast fake upstream.

One run on this machine, everything on loopback: the fake upstream
(``plumbline_kit.fakes.upstream``) is started once; each target is started in turn in front of it
(``direct`` is the fake itself, the limit) and driven by the kit's load generator
(``plumbline_kit.loadgen.scenario``) through every scenario:

    nonstream-c1    non-streamed 16-token answers, 1 worker looping
    nonstream-c256  the same, 256 workers
    stream-c32      256-chunk unpaced streams, 32 workers looping
    open-c256       2-chunk unpaced streams, 256 workers looping: a stream's open and close
    seed            2,048 concurrent streams of 64 tokens paced at 10 tok/s, each sent once
    seed-2wave      the same 2,048 workers each sending two such streams back to back (4,096
                    streams, 2,048 at a time: a fleet that keeps its slots full)
    seed-2wave-fresh  the two waves with a new connection per request (no keep-alive)
    seed-2wave-quarter  the two waves with 512 workers: one worker's share of `--workers 4`'s
                    load, and a size the 2-core machine can drive

Targets: ``direct``, ``plumbline`` (``-wN``: N uvicorn workers; ``-norecord``: the store off),
``plumbline-base`` (the gateway run from another checkout, ``PERF_BASE_TREE``: a before beside
the after, in the same rounds), ``litellm``, ``vllm-router``, ``floor``/``floor-wire`` (the bare
relays of bench/floor_proxy.py).

Every target is started once and kept up; each scenario then runs `--repeat` rounds (3 by
default) that visit the targets in turn — A B C, A B C, A B C — so a drift in the machine's load
touches every target alike. Every guarded proxy checks the same client key on every request
(`perf_procs.BENCH_KEY`). The fake answers realistic text by default (`--text realistic`:
non-ASCII, quotes, backslashes, line breaks, `plumbline_kit.fakes.text`) and every request asks for
logprobs (top 5), so each chunk carries what a real one does; `--text plain` is ``tok0 tok1``.

For each (target, scenario, round): req/s, chunks/s, latency and time to first chunk (p50/p99,
and what the proxy adds over ``direct`` in the same round), errors, the proxy's CPU time per
request and per streamed chunk (utime + stime of its process tree from /proc, before and after),
the proxy's peak RSS after each seed scenario, and for a recording Plumbline the rows the round
added to its store once they stop arriving (`records`: equal to the requests when none was lost;
counted before the CPU is read, so writing them is in it); the collector's pauses of 2 ms or
more during the round, the one-process Plumbline's (`gc_pauses`, `gc_pause_max_ms`; of them the
young generation's longest, `gc_young_max_ms`, and how many were the older two's,
`gc_older_pauses`) and the load
generator's own (`driver_gc_pause_max_ms`; it makes no full collection in a load), from the
load's start on. Each cell
of the summary is the
median of the rounds and their range (min–max). Rounds are appended to
``bench/results/gateway_perf_runs.tsv``, the summary to ``bench/results/gateway_perf_summary.md``,
both to ``bench/results/gateway_perf-<time>.json``. See bench/README.md.

    python bench/gateway_perf.py --setup                  # LiteLLM and vllm-router virtualenvs
    python bench/gateway_perf.py                          # every target, every scenario
    python bench/gateway_perf.py --target direct --target plumbline --scenario stream-c32
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import math
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import (  # noqa: E402
    MODEL,
    Proc,
    cpu_seconds,
    fake_upstream,
    floor,
    litellm,
    loop_seconds,
    pauses,
    pauses_by_generation,
    peak_rss_mb,
    plumbline,
    set_fake_default,
    vllm_router,
    watch_pauses,
)

from gateway.ledger.percentile import percentile  # noqa: E402
from plumbline_kit.loadgen.scenario import Scenario, Tally, drive  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_VENVS = Path(tempfile.gettempdir()) / "plumbline-bench-venvs"
VENV_PACKAGES = {"litellm": "litellm[proxy]", "router": "vllm-router"}

SCENARIOS = {
    s.name: s
    for s in (
        Scenario("nonstream-c1", 1, False, 16),
        Scenario("nonstream-c256", 256, False, 16),
        Scenario("stream-c32", 32, True, 256),
        Scenario("open-c256", 256, True, 2),
        Scenario("seed", 2048, True, 64, pace_tps=10.0, once=True, timeout_s=60.0),
        Scenario("seed-2wave", 2048, True, 64, pace_tps=10.0, once=True, timeout_s=60.0, waves=2),
        Scenario(
            "seed-2wave-quarter", 512, True, 64, pace_tps=10.0, once=True, timeout_s=60.0, waves=2
        ),
        Scenario(
            "seed-2wave-fresh",
            2048,
            True,
            64,
            pace_tps=10.0,
            once=True,
            timeout_s=60.0,
            waves=2,
            fresh=True,
        ),
    )
}
TARGETS = (
    "direct",
    "plumbline",
    "litellm",
    "vllm-router",
    "plumbline-w2",
    "plumbline-w4",
    "plumbline-norecord",
    "plumbline-w4-norecord",
    "plumbline-base",
    "floor",
    "floor-wire",
)
TEXTS = ("realistic", "plain")
LOGPROBS = {"logprobs": True, "top_logprobs": 5}
COLUMNS = (
    "timestamp",
    "load_avg_1m",
    "target",
    "scenario",
    "round",
    "text",
    "requests",
    "errors",
    "wall_s",
    "req_per_s",
    "chunks_per_s",
    "p50_ms",
    "p99_ms",
    "added_p50_ms",
    "added_p99_ms",
    "first_p50_ms",
    "first_p99_ms",
    "added_first_p99_ms",
    "cpu_s",
    "cpu_per_req_us",
    "cpu_per_chunk_us",
    "peak_rss_mb",
    "first_error",
    "records",
    "gc_pauses",
    "gc_pause_max_ms",
    "gc_young_max_ms",
    "gc_older_pauses",
    "driver_gc_pause_max_ms",
    "loop_per_req_us",
)


def setup(venvs: Path) -> None:
    """Create the competitors' virtualenvs (outside the repository) and install them."""
    for name, package in VENV_PACKAGES.items():
        venv = venvs / name
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", package], check=True)


def row(
    target: str,
    sc: Scenario,
    tally: Tally,
    cpu: float,
    base: dict | None,
    rss: float,
    round_: int = 0,
    text: str = "realistic",
) -> dict:
    """One result row; `base` is the direct row of the same scenario and round (for the added
    latency)."""
    ms = {
        "p50_ms": 1e3 * percentile(tally.latency, 0.50),
        "p99_ms": 1e3 * percentile(tally.latency, 0.99),
        "first_p50_ms": 1e3 * percentile(tally.first_chunk, 0.50),
        "first_p99_ms": 1e3 * percentile(tally.first_chunk, 0.99),
    }
    wall = tally.wall_s or math.nan
    added = {
        "added_p50_ms": ms["p50_ms"] - base["p50_ms"] if base else math.nan,
        "added_p99_ms": ms["p99_ms"] - base["p99_ms"] if base else math.nan,
        "added_first_p99_ms": ms["first_p99_ms"] - base["first_p99_ms"] if base else math.nan,
    }
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg_1m": os.getloadavg()[0],
        "target": target,
        "scenario": sc.name,
        "round": round_,
        "text": text,
        "requests": tally.requests,
        "errors": tally.errors,
        "wall_s": tally.wall_s,
        "req_per_s": tally.requests / wall,
        "chunks_per_s": tally.chunks / wall if sc.stream else math.nan,
        **ms,
        **added,
        "cpu_s": cpu,
        "cpu_per_req_us": 1e6 * cpu / max(tally.requests, 1),
        "cpu_per_chunk_us": 1e6 * cpu / tally.chunks if sc.stream and tally.chunks else math.nan,
        "loop_per_req_us": math.nan,  # the main threads' share of `cpu_per_req_us`
        "peak_rss_mb": rss,
        "gc_pauses": math.nan,  # set for the targets that print them (`perf_procs.watch_pauses`)
        "gc_pause_max_ms": math.nan,
        "gc_young_max_ms": math.nan,  # of them, the young generation's longest
        "gc_older_pauses": math.nan,  # and how many were of the older two
        "driver_gc_pause_max_ms": math.nan,
        "first_error": tally.first_error.replace("\t", " ").replace("\n", " "),
    }


def fmt(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


SHOWN = (
    "req_per_s",
    "chunks_per_s",
    "added_p50_ms",
    "added_p99_ms",
    "first_p99_ms",
    "added_first_p99_ms",
    "errors",
    "records",
    "cpu_per_req_us",
    "cpu_per_chunk_us",
    "loop_per_req_us",
    "peak_rss_mb",
    "gc_pauses",
    "gc_pause_max_ms",
    "gc_young_max_ms",
    "gc_older_pauses",
    "driver_gc_pause_max_ms",
)


def append(rows: list[dict], cells: list[dict], meta: dict) -> Path:
    """Append the rounds to the TSV (header once) and the summary to the Markdown file; write
    both, with `meta`, to one JSON file for this run. Returns the JSON file."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    tsv = RESULTS / "gateway_perf_runs.tsv"
    header = "\t".join(COLUMNS) + "\n"
    if tsv.exists() and tsv.stat().st_size and tsv.open(encoding="utf-8").readline() != header:
        tsv.rename(tsv.with_name(f"gateway_perf_runs-until-{meta['started'].replace(':', '')}.tsv"))
    new = not tsv.exists() or tsv.stat().st_size == 0
    with tsv.open("a", encoding="utf-8") as fh:
        if new:
            fh.write(header)
        for r in rows:
            fh.write("\t".join(str(r[c]) for c in COLUMNS) + "\n")
    with (RESULTS / "gateway_perf_summary.md").open("a", encoding="utf-8") as fh:
        fh.write(f"\n{meta['started']} ({meta['text']} text, {meta['rounds']} rounds)\n\n")
        fh.write(summary_markdown(cells) + "\n")
    out = RESULTS / f"gateway_perf-{meta['started'].replace(':', '')}.json"
    out.write_text(json.dumps({**meta, "summary": cells, "rounds": rows}, indent=2, default=str))
    return out


def markdown(rows: list[dict]) -> str:
    """One line per round (printed as the run goes)."""
    shown = ("target", "scenario", "round", *SHOWN)
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in shown) + " |" for r in rows]
    return "\n".join(lines)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of the numbers among `values` (NaN ones left out)."""
    xs = [v for v in values if isinstance(v, int | float) and not math.isnan(v)]
    if not xs:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def summarise(rows: list[dict]) -> list[dict]:
    """One cell per (scenario, target), in the order first run: each shown column's median and
    range over the rounds."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["target"]), []).append(r)
    return [
        {
            "scenario": scenario,
            "target": target,
            "rounds": len(group),
            **{c: spread([r[c] for r in group]) for c in SHOWN},
        }
        for (scenario, target), group in groups.items()
    ]


def fmt_spread(s: dict[str, float]) -> str:
    if math.isnan(s["median"]):
        return ""
    if s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def summary_markdown(cells: list[dict]) -> str:
    """Median (min–max) over the rounds, per scenario and target."""
    shown = ("scenario", "target", "rounds", *SHOWN)
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for c in cells:
        values = [c["scenario"], c["target"], str(c["rounds"]), *(fmt_spread(c[k]) for k in SHOWN)]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


def starter(target: str, fake: Proc, scratch: Path, venvs: Path) -> Callable[[], Proc]:
    if target == "direct":
        return lambda: fake
    if target == "plumbline-base":  # the same, run from the checkout PERF_BASE_TREE names
        tree = Path(os.environ.get("PERF_BASE_TREE", "")).resolve()
        if not (tree / "gateway").is_dir():
            raise RuntimeError("plumbline-base needs PERF_BASE_TREE: a checkout to run from")
        return lambda: plumbline(fake, scratch, tree=tree)
    if target.startswith("plumbline"):
        base, cut, _ = target.partition("-norecord")
        workers = int(base.partition("-w")[2] or 1)
        return lambda: plumbline(fake, scratch, workers, record=not cut)
    if target.startswith("floor"):
        return lambda: floor(fake, scratch, wire=target == "floor-wire")
    if target == "litellm":
        return lambda: litellm(fake, scratch, venvs / "litellm")
    if target == "vllm-router":
        return lambda: vllm_router(fake, scratch, venvs / "router")
    raise ValueError(f"unknown target {target!r}")


WARMUP = 32  # short requests before each round (recorded, not counted)


def recorded_in(target: str, scratch: Path) -> Path | None:
    """The SQLite store a recording gateway target writes (`perf_procs.plumbline`), else None."""
    stem = "plumbline-base" if target == "plumbline-base" else "plumbline"
    return (
        scratch / f"{stem}.db"
        if target.startswith("plumbline") and "-norecord" not in target
        else None
    )


def record_count(store: Path | None) -> int:
    if store is None or not store.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)) as db:
        return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])


async def settled_records(store: Path | None, before: int, expected: int) -> float:
    """The rows a round added to the target's store, once they stop arriving (the writer lags
    the answers by its batch): `expected` when nothing was lost. NaN for a target
    that records nothing. Counted before the target's CPU is read, so the writing is in it."""
    if store is None:
        return math.nan
    deadline, last, still = time.monotonic() + 30, -1, 0
    while time.monotonic() < deadline:
        n = record_count(store) - before
        if n >= expected:
            return float(n)
        still = still + 1 if n == last else 0
        if still >= 20:  # two seconds without a new row
            return float(n)
        last = n
        await asyncio.sleep(0.1)
    return float(record_count(store) - before)


def schedule(
    targets: list[str], scenarios: list[Scenario], rounds: int
) -> list[tuple[Scenario, int, str]]:
    """The order of the runs: per scenario, `rounds` rounds that each visit every target in turn
    (A B C, A B C, ...), `direct` first in each round when it is a target (the others' added
    latency is against the direct run of their own round)."""
    order = sorted(targets, key=lambda t: t != "direct")
    return [(sc, r, t) for sc in scenarios for r in range(1, rounds + 1) for t in order]


async def measure(
    targets: list[str],
    scenarios: list[Scenario],
    seconds: float,
    venvs: Path,
    scratch: Path,
    rounds: int = 3,
    text: str = "realistic",
) -> list[dict]:
    """Start every target, then per scenario `rounds` rounds visiting the targets in turn."""
    fake = fake_upstream(scratch)
    procs: dict[str, Proc] = {}
    rows: list[dict] = []
    extra = LOGPROBS if text == "realistic" else None
    # The load generator's own collector pauses (it drives every target alike, direct too).
    driver_gc = io.StringIO()
    watching = len(gc.callbacks)
    watch_pauses(driver_gc)
    try:
        for target in targets:
            try:
                procs[target] = starter(target, fake, scratch, venvs)()
            except (RuntimeError, OSError) as exc:
                print(f"{target}: not started ({exc})", flush=True)
        base: dict[tuple[str, int], dict] = {}
        for sc, round_, target in schedule(list(procs), scenarios, rounds):
            proc = procs[target]
            set_fake_default(
                fake,
                {
                    "tokens": sc.tokens,
                    "pace_tps": sc.pace_tps,
                    "realistic": True if text == "realistic" else None,
                },
            )
            store = recorded_in(target, scratch)
            rows0 = record_count(store)
            cpu0, loop0 = cpu_seconds(proc.pid), loop_seconds(proc.pid)
            url = proc.base_url + "/chat/completions"
            tally = await drive(url, sc, MODEL, seconds, proc.headers, WARMUP, extra=extra)
            records = await settled_records(store, rows0, tally.requests + WARMUP) - WARMUP
            cpu = cpu_seconds(proc.pid) - cpu0
            loop = loop_seconds(proc.pid) - loop0
            rss = peak_rss_mb(proc.pid) if sc.name.startswith("seed") else math.nan
            r = row(target, sc, tally, cpu, base.get((sc.name, round_)), rss, round_, text)
            r["records"] = records
            r["loop_per_req_us"] = 1e6 * loop / max(tally.requests, 1)
            # The collector pauses of 2 ms or more in the load (after the warm-up): the load
            # generator's that began in it (not its collection just before), and the one-process
            # gateway's that ended in it or after (Plumbline targets print them:
            # `perf_procs.watch_pauses`).
            driven = [b - a for a, b in pauses(driver_gc.getvalue()) if a >= tally.started]
            r["driver_gc_pause_max_ms"] = 1e3 * max(driven, default=0.0)
            if target.startswith("plumbline") and "-w" not in target:
                log = proc.log.read_text(errors="replace")
                during = [(g, a, b) for g, a, b in pauses_by_generation(log) if b >= tally.started]
                r["gc_pauses"] = len(during)
                r["gc_pause_max_ms"] = 1e3 * max((b - a for _, a, b in during), default=0.0)
                young = [b - a for g, a, b in during if g == 0]
                r["gc_young_max_ms"] = 1e3 * max(young, default=0.0)
                r["gc_older_pauses"] = len(during) - len(young)
            if target == "direct":
                base[(sc.name, round_)] = r
            rows.append(r)
            print(markdown([r]).splitlines()[-1], flush=True)
    finally:
        del gc.callbacks[watching:]
        for proc in procs.values():
            if proc is not fake:
                proc.stop()
        fake.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", action="append", choices=TARGETS)
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each looping scenario")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per scenario (at least 3)")
    ap.add_argument("--text", choices=TEXTS, default="realistic", help="the fake's answer text")
    ap.add_argument("--venvs", type=Path, default=DEFAULT_VENVS, help="competitors' virtualenvs")
    ap.add_argument("--setup", action="store_true", help="create the virtualenvs and exit")
    args = ap.parse_args()
    if args.setup:
        setup(args.venvs)
        return
    if args.repeat < 3:
        ap.error("--repeat must be at least 3: a median and a range need three rounds")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 2,048 streams need the sockets
    targets = args.target or list(TARGETS[:4])
    if targets[0] != "direct":
        targets = ["direct", *[t for t in targets if t != "direct"]]
    scenarios = [SCENARIOS[n] for n in (args.scenario or SCENARIOS)]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()[0]
    print(f"load average {load0:.2f} on {os.cpu_count()} cores", flush=True)
    print("\n".join(markdown([]).splitlines()[:2]), flush=True)
    with tempfile.TemporaryDirectory(prefix="plumbline-perf-") as tmp:
        runner = asyncio.run
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
        work = measure(
            targets, scenarios, args.seconds, args.venvs, Path(tmp), args.repeat, args.text
        )
        rows = runner(work)
    cells = summarise(rows)
    meta = {
        "started": started,
        "argv": sys.argv[1:],
        "text": args.text,
        "rounds": args.repeat,
        "seconds": args.seconds,
        "load_avg_start": load0,
        "load_avg_end": os.getloadavg()[0],
        "cores": os.cpu_count(),
    }
    out = append(rows, cells, meta)
    print(f"\nload average {meta['load_avg_end']:.2f} at the end; median (min–max) of the rounds\n")
    print(summary_markdown(cells))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
