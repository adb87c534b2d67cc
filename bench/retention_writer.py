"""Retention against a writer: how long a record batch waits while the oldest day is dropped.

Fills a store with `--days` UTC days of requests at `--rate` a second (`bench/month_gen.py`,
generated inside the database), then drops the oldest day while a writer thread (another
gateway's record queue) inserts a 30-row batch into the newest day every 50 ms, and notes each
batch's time: before the drop (idle), and during it. On SQLite each way is measured on the same
day, regenerated between them:

- `one delete`: what retention did before, one `DELETE … WHERE time < day_end` (SQLite's one
  write lock held for the whole day);
- `chunks`: `Store.drop_before` (`gateway.ledger.sweep`: short transactions with pauses, then
  the freed pages returned a bounded number a transaction).

On PostgreSQL `Store.drop_before` drops the day's partition.

    python bench/retention_writer.py --db sqlite --days 2 --rate 10
    python bench/retention_writer.py --db postgres --days 2 --rate 10

Printed and appended to `--out`.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlalchemy as sa  # noqa: E402
from month_gen import generate_day  # noqa: E402
from month_store import END, opened  # noqa: E402

from gateway.ledger.database import writing  # noqa: E402
from gateway.ledger.partitions import DAY  # noqa: E402
from gateway.ledger.percentile import percentile  # noqa: E402
from gateway.ledger.store import Store  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def one_delete(store: Store, end: float) -> None:
    """Retention as it was on SQLite: the whole day in one transaction."""
    with writing(store.engine) as conn:
        conn.exec_driver_sql("DELETE FROM requests WHERE time < ?", (end,))


def against_writer(store: Store, drop: Callable[[], Any], now: float) -> dict[str, Any]:
    """Batch times (ms) of a writer for 1 s idle, then while `drop` runs (and 0.2 s after)."""
    with store.engine.connect() as conn:
        template = dict(conn.execute(sa.text("SELECT * FROM requests LIMIT 1")).one()._mapping)
    stop = threading.Event()
    times: dict[str, list[float]] = {"idle": [], "during": []}
    phase = ["idle"]
    failed = {"idle": 0, "during": 0}

    def writer() -> None:
        n = 0
        while not stop.is_set():
            rows = [
                {**template, "time": now - 10 + n * 1e-4 + k * 1e-6, "request_id": f"w{n}-{k}"}
                for k in range(30)
            ]
            t0 = time.perf_counter()
            try:
                store.write(rows)
            except sa.exc.OperationalError:  # locked past the busy timeout: a record queue spools
                failed[phase[0]] += 1
            times[phase[0]].append(1e3 * (time.perf_counter() - t0))
            n += 1
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(1.0)
    phase[0] = "during"
    t0 = time.perf_counter()
    drop()
    took = time.perf_counter() - t0
    time.sleep(0.2)
    stop.set()
    thread.join()
    out: dict[str, Any] = {"drop_s": took}
    for name, ms in times.items():
        out[name] = (len(ms), percentile(ms, 0.5), percentile(ms, 0.99), max(ms), failed[name])
    return out


def left_before(store: Store, end: float) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(sa.text(f"SELECT count(*) FROM requests WHERE time < {end}")).scalar()
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument(
        "--out", type=Path, default=RESULTS / "2026-12-04-housekeeping-request-latency.md"
    )
    args = ap.parse_args()
    first = END - args.days * DAY
    end, now = first + DAY, END - 1.0
    ways: list[tuple[str, Callable[[Store], Any]]] = [
        (
            "chunks" if args.db == "sqlite" else "partition drop",
            lambda s: s.drop_before("requests", end),
        )
    ]
    if args.db == "sqlite":
        ways.insert(0, ("one delete", lambda s: one_delete(s, end)))
    results = []
    with opened(args.db) as store:
        for d in range(1, args.days):
            generate_day(store, first + d * DAY, args.rate)
        for name, drop in ways:
            generate_day(store, first, args.rate)
            kept = against_writer(store, lambda drop=drop: drop(store), now)
            kept["left"] = left_before(store, end)
            results.append((name, kept))
            print(name, kept, flush=True)
    rows = int(args.rate * DAY)
    lines = [
        f"\n### `python bench/retention_writer.py {' '.join(sys.argv[1:])}`\n",
        f"{args.db}: the oldest of {args.days} days ({rows:,} rows a day) dropped while a writer "
        "inserts 30 rows every 50 ms.\n",
        "| way | drop s | rows left before the cut | writer batches idle: n, p50/p99/max ms | "
        "during the drop: n, p50/p99/max ms |",
        "|---|---|---|---|---|",
    ]
    for name, r in results:
        cells = [
            f"{r[p][0]}, {r[p][1]:.1f} / {r[p][2]:.1f} / {r[p][3]:.1f}"
            + (f" ({r[p][4]} failed: locked past the 5 s busy timeout)" if r[p][4] else "")
            for p in ("idle", "during")
        ]
        lines.append(f"| {name} | {r['drop_s']:.2f} | {r['left']} | {cells[0]} | {cells[1]} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with args.out.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
