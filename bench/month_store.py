"""A ledger that holds a month: reports, console panels and retention on a big store.

Fills a store with `--days` UTC days of requests at `--rate` a second, generated inside the
database (`bench/month_gen.py`: `generate_series` on PostgreSQL, a recursive CTE on SQLite; day
partitions as the store makes them), and after each size in `--sizes` (days) times, with `now`
at the end of the data:

- `report cost --since 24h`, `7d` and `30d`, `report health` (24h), the console's upstreams,
  cost and traffic panels (24h and 7d; cost, health and traffic also 1h): by raw scan, then
  again after the 5-minute rollups are brought up to date (`Store.roll_up`, timed: the
  backfill a first housekeeping tick does);
- the store's bytes per record;
- at the largest size, retention dropping the oldest day (a partition DROP on PostgreSQL, a
  DELETE on SQLite) while a writer inserts a batch every 50 ms: the writer's worst batch time.

    python bench/month_store.py --db postgres --days 7 --rate 30 --sizes 1,3,7
    python bench/month_store.py --db sqlite --days 3 --rate 10 --sizes 1,3
    python bench/month_store.py --db postgres --rate 300 --hours 3   # the seed's density
    python bench/month_store.py --db postgres --days 30 --rate 10 --raw-days 2 --sizes 7,30

`--raw-days K` keeps the rows K days and every rollup (`[store] rollup_retention_days`): each
generated day is rolled up and the rows past K days dropped, as housekeeping would.

PostgreSQL is a throwaway cluster (tests/gateway/pg.py). Results are appended to `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlalchemy as sa  # noqa: E402
from month_gen import config, generate_day, generate_span  # noqa: E402

from gateway.edge.console import panels  # noqa: E402
from gateway.ledger import sweep  # noqa: E402
from gateway.ledger.partitions import DAY, day_start, partition_ddl  # noqa: E402
from gateway.ledger.rollup_sql import TABLES  # noqa: E402
from gateway.ledger.store import Store  # noqa: E402
from gateway.reports.cost import report_cost  # noqa: E402
from gateway.reports.health import report_health  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
END = 1_796_256_000  # 2026-12-03 00:00 UTC: the generated days end here
RELEASE_S = 60.0  # SQLite: how long retention's page release is timed (`release`)


@contextlib.contextmanager
def opened(db: str) -> Iterator[Store]:
    if db == "postgres":
        from tests.gateway.pg import cluster

        with cluster() as c:
            store = Store(c.url)
            try:
                yield store
            finally:
                store.close()
        return
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{folder}/month.db")
        try:
            yield store
        finally:
            store.close()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def size_bytes(store: Store) -> int:
    with store.engine.connect() as conn:
        if store.postgres:
            q = "SELECT pg_total_relation_size(relid) FROM pg_partition_tree('requests')"
            return int(sum(r[0] or 0 for r in conn.execute(sa.text(q))))
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar() or 0
        free = conn.execute(sa.text("PRAGMA freelist_count")).scalar() or 0
        size = conn.execute(sa.text("PRAGMA page_size")).scalar() or 0
        return int((pages - free) * size)


def probes(store: Store, now: float) -> dict[str, Callable[[], Any]]:
    cfg = config()
    health = {"upstreams": {}}
    return {
        "report cost 24h": lambda: report_cost(cfg, "24h", "json", store=store, now=now),
        "report cost 7d": lambda: report_cost(cfg, "7d", "json", store=store, now=now),
        "report cost 30d": lambda: report_cost(cfg, "30d", "json", store=store, now=now),
        "report health 24h": lambda: report_health(cfg, "24h", "json", store=store, now=now),
        "panel upstreams 24h": lambda: panels.upstreams(cfg, store, health, "24h", now),
        "panel cost 24h": lambda: panels.cost(cfg, store, "24h", now),
        "panel cost 7d": lambda: panels.cost(cfg, store, "7d", now),
        "panel traffic 24h": lambda: panels.traffic(cfg, store, "24h", now),
        "panel traffic 7d": lambda: panels.traffic(cfg, store, "7d", now),
        # Windows that start inside the data: raw rows at both ends (the --hours runs).
        "report cost 1h": lambda: report_cost(cfg, "1h", "json", store=store, now=now),
        "report health 1h": lambda: report_health(cfg, "1h", "json", store=store, now=now),
        "panel traffic 1h": lambda: panels.traffic(cfg, store, "1h", now),
    }


def retention(store: Store, first_day: int, now: float) -> dict[str, float]:
    """Drop the oldest day while a writer inserts 30 rows every 50 ms into the newest day (the
    next one when the oldest is the only one: today is never the day retention drops)."""
    with store.engine.connect() as conn:
        template = dict(conn.execute(sa.text("SELECT * FROM requests LIMIT 1")).one()._mapping)
    if day_start(now) == first_day:
        now += DAY
        if store.engine.dialect.name == "postgresql":
            with store.engine.begin() as conn:
                conn.execute(partition_ddl("requests", day_start(now)))
    stop, worst, batches = threading.Event(), [0.0, 0.0], [0]

    def writer(slot: int) -> None:
        n = 0
        while not stop.is_set():
            rows = [
                {
                    **template,
                    "time": now - 10 + n * 1e-4 + k * 1e-6,
                    "request_id": f"w{slot}{n}-{k}",
                }
                for k in range(30)
            ]
            worst[slot] = max(worst[slot], timed(lambda rows=rows: store.write(rows)))
            batches[0] += 1
            n += 1
            time.sleep(0.05)

    t = threading.Thread(target=writer, args=(0,))
    t.start()
    time.sleep(1.0)
    stop.set()
    t.join()
    stop.clear()
    t = threading.Thread(target=writer, args=(1,))
    t.start()
    out: dict[str, float] = {}
    if store.postgres:
        out["drop_s"] = timed(lambda: store.drop_before("requests", first_day + DAY))
    else:  # `drop_before`'s two steps, the second for `RELEASE_S` at most: see `release`
        end = first_day + DAY
        out["drop_s"] = timed(lambda: sweep.delete_before(store.engine, "requests", "time", end))
        out.update(release(store))
    time.sleep(0.2)
    stop.set()
    t.join()
    return {**out, "writer_idle_worst_s": worst[0], "writer_during_worst_s": worst[1]}


def release(store: Store) -> dict[str, float]:
    """SQLite: the freed pages given back to the file system (`sweep.release_pages`, which
    retention runs where they are over half the file: here the dropped day was all of it), for
    `RELEASE_S` at most; its rate. A store keeping a month drops a thirtieth of it a day and
    never gets there: the next day's rows reuse the pages."""
    stop = threading.Event()
    timer = threading.Timer(RELEASE_S, stop.set)
    timer.start()
    t0 = time.perf_counter()
    pages = sweep.release_pages(store.engine, stop=stop)
    took = time.perf_counter() - t0
    timer.cancel()
    with store.engine.connect() as conn:
        size = conn.execute(sa.text("PRAGMA page_size")).scalar() or 0
    return {"release_s": took, "released_mb": pages * size / 1e6}


def tiered(store: Store, now: float, raw_days: int, days: int) -> dict[str, float]:
    """Roll the day up, then drop the rows older than `raw_days` and keep every rollup, as
    housekeeping does with `rollup_retention_days` past `retention_days`."""
    rolled = timed(lambda: store.roll_up(config(), now, max_hours=100_000))
    dropped = timed(
        lambda: store.apply_retention(raw_days, raw_days, now=now, rollup_retention_days=days + 1)
    )
    return {"rollup_s": rolled, "retention_s": dropped}


def rollup_bytes(store: Store) -> int | None:
    """The rollup tables' bytes (PostgreSQL; None on SQLite, which keeps no size a table)."""
    if not store.postgres:
        return None
    with store.engine.connect() as conn:
        names = [t.name for t in TABLES]
        q = sa.text(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE relname = ANY(:n)"
        )
        return int(conn.execute(q, {"n": names}).scalar() or 0)


def measure(store: Store, now: float, rows: int, raw: bool = True) -> dict[str, Any]:
    """The probes by raw scan (unless `raw` is false: rows already dropped past their rollups),
    the rollup backfill's time, the probes from the rollups, and the store's bytes."""
    kept, size = store.count(), size_bytes(store)
    out: dict[str, Any] = {"rows": rows, "rows_kept": kept, "bytes_per_record": size / kept}
    out["requests_bytes"], out["rollup_bytes"] = size, rollup_bytes(store)
    raw = {name: timed(fn) for name, fn in probes(store, now).items()} if raw else None
    out["rollup_s"] = timed(lambda: store.roll_up(config(), now, max_hours=100_000))
    out["raw"], out["rolled"] = raw, {name: timed(fn) for name, fn in probes(store, now).items()}
    return out


def table(db: str, rate: float, sizes: list[dict[str, Any]]) -> str:
    head = f"| {db}, {rate:g} req/s | " + " | ".join(f"{s['rows']:,} rows" for s in sizes)
    lines = [head + " |", "|---" * (len(sizes) + 1) + "|"]
    lines.append(
        "| bytes/record | " + " | ".join(f"{s['bytes_per_record']:.0f}" for s in sizes) + " |"
    )
    lines.append(
        "| rollup backfill s | " + " | ".join(f"{s['rollup_s']:.2f}" for s in sizes) + " |"
    )
    lines.append("| rows kept | " + " | ".join(f"{s['rows_kept']:,}" for s in sizes) + " |")
    lines.append(
        "| MB: rows / rollups | "
        + " | ".join(
            f"{s['requests_bytes'] / 1e6:,.0f} / "
            + ("–" if s["rollup_bytes"] is None else f"{s['rollup_bytes'] / 1e6:,.1f}")
            for s in sizes
        )
        + " |"
    )
    for name in sizes[0]["rolled"]:
        cells = [
            f"{s['rolled'][name]:.2f}"
            if s["raw"] is None
            else f"{s['raw'][name]:.2f} → {s['rolled'][name]:.2f}"
            for s in sizes
        ]
        how = "rollup" if sizes[0]["raw"] is None else "raw → rollup"
        lines.append(f"| {name} ({how}) s | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--sizes", default="", help="days after which to measure (default: --days)")
    ap.add_argument(
        "--hours",
        type=int,
        default=0,
        help="instead of days: this many hours before the end (the seed density's window edges)",
    )
    ap.add_argument(
        "--raw-days",
        type=int,
        default=0,
        help="keep rows this many days, rollups all (`rollup_retention_days`): after each day "
        "is generated it is rolled up and older rows dropped, so a month at the seed's rate "
        "fits the disk",
    )
    ap.add_argument(
        "--rollups-only",
        action="store_true",
        help="time the probes from the rollups only, not by raw scan first (minutes a probe at "
        "the seed's rate on SQLite)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "2026-12-04-month-store.md")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s} | {args.days})
    first = END - args.days * DAY
    results, rows = [], 0
    with opened(args.db) as store:
        if args.hours:
            gen = timed(
                lambda: generate_span(store, END - args.hours * 3600, args.hours * 3600, args.rate)
            )
            rows = int(args.rate * args.hours * 3600)
            print(f"{args.hours} h: {rows:,} rows, generated in {gen:.1f} s", flush=True)
            results.append(measure(store, END - 1.0, rows))
            print(results[-1], flush=True)
            args.days = 0
        for d in range(args.days):
            gen = timed(lambda d=d: generate_day(store, first + d * DAY, args.rate))
            rows += int(args.rate * DAY)
            print(f"day {d + 1}: {rows:,} rows, generated in {gen:.1f} s", flush=True)
            if args.raw_days and d + 1 > args.raw_days:
                print(f"  {tiered(store, first + (d + 1) * DAY, args.raw_days, args.days)}")
            if d + 1 in sizes:
                at = first + (d + 1) * DAY - 1.0
                raw = not (args.raw_days or args.rollups_only)
                results.append(measure(store, at, rows, raw=raw))
                print(results[-1], flush=True)
        oldest = END - args.raw_days * DAY if args.raw_days else first
        kept = retention(store, oldest, END - 1.0) if args.days else None
        print(kept, flush=True)
    text = table(args.db, args.rate, results)
    if kept is not None:
        released = ""
        if "release_s" in kept:
            rate = kept["released_mb"] / max(kept["release_s"], 1e-9)
            released = (
                f"its pages given back to the file system at {rate:.1f} MB/s "
                f"({kept['released_mb']:.0f} MB in {kept['release_s']:.0f} s); "
            )
        text += (
            f"\n\nRetention of the oldest day of rows ({args.rate * DAY:,.0f} rows a day, "
            f"{args.db}): {kept['drop_s']:.3f} s; {released}"
            f"a writer's worst 30-row batch {kept['writer_during_worst_s'] * 1000:.1f} ms during "
            f"it, {kept['writer_idle_worst_s'] * 1000:.1f} ms before it.\n"
        )
    print(text)
    with args.out.open("a") as f:
        f.write(f"\n### `{' '.join(sys.argv[1:])}`\n\n{text}\n")


if __name__ == "__main__":
    main()
