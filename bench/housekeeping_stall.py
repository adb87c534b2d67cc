"""Housekeeping's node busy hours: what a request waits while they are computed.

The gateway's housekeeping computes each node's busy hours over the last day once a minute, in a
thread. Walking a day of request intervals in Python holds the GIL for the whole walk, so every
request that arrives meanwhile waits on it; the database's gaps-and-islands query
(`gateway.ledger.queries.busy_seconds_query`) returns one number and leaves the GIL free while
the database works; with the 5-minute rollups (`gateway.ledger.rollups`) a steady tick reads whole
buckets from `busy_rollup` and scans only a few minutes of rows at the ends. This fills a store with
`--records` requests at `--rate` per second over two upstreams of one node, then, for each
method, runs it in a thread while the event loop ticks every millisecond and notes how late each
tick is (a request's wait on the loop):

    python bench/housekeeping_stall.py --records 1000000            # SQLite in a temp folder
    python bench/housekeeping_stall.py --store postgresql://...      # an existing database

Printed and appended to bench/results/housekeeping_stall.md: the store's size, each method's
time, and the loop's tick lateness (p50, p99, max) during it, beside an idle baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import Config  # noqa: E402
from gateway.ledger.cost import busy_hours  # noqa: E402
from gateway.ledger.percentile import percentile  # noqa: E402
from gateway.ledger.record import Record  # noqa: E402
from gateway.ledger.store import Store, record_row  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
UPSTREAMS = ("node-a", "node-b")


def config() -> Config:
    url = "http://127.0.0.1:1/v1"
    one = {"kind": "vllm", "base_url": url, "model": "m", "node": "box"}
    ups = [{"name": n, **one} for n in UPSTREAMS]
    return Config.model_validate(
        {
            "upstreams": ups,
            "models": {"m": {"upstreams": list(UPSTREAMS)}},
            "nodes": {"box": {"cost_per_hour": 2.0, "utilisation": 0.8}},
        }
    )


def fill(store: Store, records: int, rate: float, end: float, batch: int = 20_000) -> None:
    """`records` requests at `rate` a second ending at `end`, 6.4 s long each (a 64-token stream
    at 10 tok/s), alternating between the node's upstreams."""
    template = record_row(
        Record(
            request_id="x",
            door="chat",
            model="m",
            stream=True,
            time=0.0,
            upstream="node-a",
            status=200,
            prompt_tokens=200,
            completion_tokens=64,
            e2e_s=6.4,
        )
    )
    start = end - records / rate
    for lo in range(0, records, batch):
        rows = [
            template
            | {"request_id": f"r{i}", "time": start + i / rate, "upstream": UPSTREAMS[i % 2]}
            for i in range(lo, min(lo + batch, records))
        ]
        store.write(rows)


async def lateness(
    work: Callable[[], float] | None, idle_s: float = 2.0
) -> tuple[float, list[float], float]:
    """Run `work` in a thread (or wait `idle_s`) while the loop ticks every millisecond: the
    work's seconds, each tick's lateness in ms, and what the work returned."""
    late: list[float] = []
    done = threading.Event()
    took, result = 0.0, float("nan")

    def run() -> None:
        nonlocal took, result
        t0 = time.perf_counter()
        if work is not None:
            result = work()
        else:
            time.sleep(idle_s)
        took = time.perf_counter() - t0
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    while not done.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        late.append(1e3 * (time.perf_counter() - t0 - 0.001))
    thread.join()
    return took, late, result


async def measure(store: Store, cfg: Config, since: float, until: float) -> list[tuple]:
    def python_walk() -> float:
        return busy_hours(store.intervals(list(UPSTREAMS), since, until))

    def in_database() -> float:
        return store.node_hours(cfg, since, until)["box"]

    def backfill() -> float:
        """A first tick with the rollups: every bucket of the store rolled up, then read."""
        store.roll_up(cfg, until, max_hours=10_000)
        return store.node_hours(cfg, since, until)["box"]

    def rolled_tick() -> float:
        """A steady tick: a bucket or two new to roll up; whole buckets read from rollups."""
        store.roll_up(cfg, until)
        return store.node_hours(cfg, since, until)["box"]

    methods = (
        ("idle", None),
        ("python walk", python_walk),
        ("database", in_database),
        ("rollup backfill", backfill),
        ("rolled-up tick", rolled_tick),
    )
    rows = []
    for name, work in methods:
        took, late, hours = await lateness(work)
        rows.append(
            (
                name,
                took,
                percentile(late, 0.50),
                percentile(late, 0.99),
                max(late),
                len(late),
                hours,
            )
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=300.0, help="requests a second (the seed's)")
    ap.add_argument("--store", help="a database URL (default: SQLite in a temp folder)")
    args = ap.parse_args()
    cfg = config()
    with tempfile.TemporaryDirectory(prefix="plumbline-hk-") as tmp:
        store = Store(args.store or f"sqlite:///{tmp}/records.db")
        until = time.time()
        t0 = time.perf_counter()
        fill(store, args.records, args.rate, until)
        filled = time.perf_counter() - t0
        rows = asyncio.run(measure(store, cfg, until - 86_400, until))
        store.close()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    kind = "PostgreSQL" if args.store else "SQLite"
    lines = [
        f"\n{started}: {args.records:,} records at {args.rate:g}/s on {kind} "
        f"(filled in {filled:.0f} s)\n",
        "| method | seconds | tick late p50 ms | p99 ms | max ms | ticks | busy hours |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {n} | {s:.3f} | {a:.2f} | {b:.2f} | {c:.2f} | {k} | {h:.4f} |"
            for n, s, a, b, c, k, h in rows
        ),
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "housekeeping_stall.md").open("a", encoding="utf-8") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    main()
