"""Request latency through the gateway while its housekeeping runs, against while it does not.

Starts the fake upstream and a real `plumbline serve` on a store filled beforehand inside the
database (`bench/month_gen.py`'s rows): the last day at `--day-rate` requests a second, the
last `--hot-s` seconds at `--rate` (what a report's window ends scan raw), and one expired day
(`--expired-rate`, older than `retention_days`) that the first housekeeping run's retention
deletes. The gateway's configuration names the generated rows'
nodes and upstreams, so the rollups and busy hours have them to work on, and routes the bench's
model to the fake on one of those nodes. The rollups are brought up to date before the
gateway starts, as on a gateway that has run all day (`--cold`: left to its housekeeping, which
backfills six hours of buckets a run).

Housekeeping runs every `--interval` seconds (`store.housekeeping_interval_s`); each run logs
what its parts took (`gateway/edge/housekeeping.py`), which gives the windows when it ran. The
bench sends `--rate` requests a second, open loop (each at its time, whatever the others do),
for `--seconds`, and each request's latency is from when it was due to its answer's end. A
request whose span overlaps a housekeeping run counts in that run's phase (the first run with
its rollup backfill and retention apart); one that overlaps none counts in the quiet phase.
Runs and gaps alternate (A B A B …), so a drift in the box's load hits both.

    python bench/housekeeping_latency.py --db sqlite
    python bench/housekeeping_latency.py --db postgres

Printed and appended to `--out`, with the command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from month_gen import APIS, NODES, ROUTES, day_sql  # noqa: E402
from perf_procs import (  # noqa: E402
    BENCH_HEADERS,
    BENCH_KEY,
    MODEL,
    Proc,
    fake_upstream,
    free_port,
    gc_watch,
    launch,
    pauses,
    set_fake_default,
    watch_pauses,
)

from gateway.config import load_config  # noqa: E402
from gateway.ledger.partitions import DAY, day_start, partition_ddl  # noqa: E402
from gateway.ledger.percentile import percentile  # noqa: E402
from gateway.ledger.store import Store  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "2026-12-04-housekeeping-request-latency.md"
BUCKET_RUN_S = 0.1  # a rollups part this long rolled up a bucket (an idle one takes ~10 ms)
SPAWN = re.compile(r"^(\S+ \S+) INFO \S+ \[-\] the store's upkeep runs in a child", re.MULTILINE)
LINE = re.compile(r"^(\S+ \S+) INFO \S+ \[-\] housekeeping took ([\d.]+) s \((.*)\)$", re.MULTILINE)


def fill(store: Store, t0: float, seconds: float, rate: float) -> int:
    """`month_gen`'s rows from `t0` for `seconds` at `rate` a second (partitions made)."""
    n = int(seconds * rate)
    with store.engine.begin() as conn:
        if store.postgres:
            for day in range(day_start(t0), day_start(t0 + seconds) + DAY, DAY):
                conn.execute(partition_ddl("requests", day))
                conn.execute(partition_ddl("contents", day))
        conn.execute(sa.text(day_sql(store.postgres)), {"t0": t0, "step": 1 / rate, "n": n})
    return n


def config_toml(
    port: int, store_url: str, fake: Proc, interval: float, upkeep_process: bool = False
) -> str:
    """The gateway's configuration: the generated rows' upstreams (unreachable, as in
    month_gen) and nodes, and the bench's model on the fake, which runs on node box-a."""
    import hashlib

    digest = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
    out = [
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nhealth_interval_s = 30\n',
        f'[[access.keys]]\nid = "bench"\nsha256 = "{digest}"\nrole = "client"\n',
        f'[store]\nurl = "{store_url}"\nhousekeeping_interval_s = {interval}\n'
        f"upkeep_process = {str(upkeep_process).lower()}\n",
        "[nodes.box-a]\ncost_per_hour = 2.0\n\n[nodes.box-b]\ncost_per_hour = 4.0\n",
        f'[[upstreams]]\nname = "fake"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
        f'model = "{MODEL}"\nnode = "box-a"\n',
    ]
    dead = "http://127.0.0.1:1/v1"
    for name, node in NODES.items():
        out.append(
            f'[[upstreams]]\nname = "{name}"\nkind = "vllm"\nbase_url = "{dead}"\n'
            f'model = "m"\nnode = "{node}"\n'
        )
    for name in APIS:
        out.append(
            f'[[upstreams]]\nname = "{name}"\nkind = "openai"\nbase_url = "{dead}"\nmodel = "m"\n'
        )
    out.append(f'[models.{MODEL}]\nupstreams = ["fake"]\n')
    for model, routes, _ in ROUTES:
        ups = ", ".join(f'"{u}"' for u, _ in routes)
        out.append(f"[models.{model}]\nupstreams = [{ups}]\n")
    return "\n".join(out)


@dataclass(frozen=True)
class Run:
    """One housekeeping run, from its log line: when it started and ended, and its parts."""

    start: float
    end: float
    parts: dict[str, float]
    spawned: bool = False  # the run that started the upkeep's child process


def runs(log: str) -> list[Run]:
    out = []
    spawn = SPAWN.search(log)
    spawned_at = stamp_time(spawn.group(1)) if spawn else None
    for stamp, total, parts in LINE.findall(log):
        end = stamp_time(stamp)
        named = {p.rsplit(" ", 2)[0]: float(p.rsplit(" ", 2)[1]) for p in parts.split(", ") if p}
        first_after = spawned_at is not None and end >= spawned_at
        out.append(Run(end - float(total), end, named, first_after))
        if first_after:
            spawned_at = None
    return out


def stamp_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


async def drive(
    url: str, rate: float, seconds: float, gc_out: io.StringIO
) -> list[tuple[float, float, bool]]:
    """`rate` requests a second for `seconds`, open loop: (due, done, ok) of each. The load
    generator keeps only the requests in flight and each one's three numbers: when it kept
    every request's task, its collector's full collections over them grew to 90-160 ms, and
    every request due meanwhile read as that much slower (the slowest "quiet" requests of the
    earlier results were these). Its collector's pauses go to `gc_out` (`watch_pauses`)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    out: list[tuple[float, float, bool]] = []
    connector = aiohttp.TCPConnector(limit=512)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=BENCH_HEADERS
    ) as session:

        async def one(due: float) -> None:
            ok = False
            try:
                async with session.post(url + "/chat/completions", json=body) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (aiohttp.ClientError, TimeoutError):
                pass
            out.append((due, time.time(), ok))

        t0 = time.time() + 0.5
        flying: set[asyncio.Task[None]] = set()
        gc.freeze()  # what exists before the load is not walked again
        watching = len(gc.callbacks)
        watch_pauses(gc_out)
        for i in range(int(rate * seconds)):
            due = t0 + i / rate
            await asyncio.sleep(max(0.0, due - time.time()))
            task = asyncio.create_task(one(due))
            flying.add(task)
            task.add_done_callback(flying.discard)
        while flying:
            await asyncio.wait(set(flying))
        del gc.callbacks[watching:]
    return out


def phases(
    samples: list[tuple[float, float, bool]],
    ran: list[Run],
    skip_s: float,
    collecting: Sequence[tuple[float, float]] = (),
) -> dict[str, list[float]]:
    """Latencies (ms) by phase: quiet, during a steady run, during a later run that rolled up
    a bucket (its rollups `BUCKET_RUN_S` or more: once in five minutes, the bucket the load
    filled), during the run that started the upkeep's process, during the first run's rollups
    and economics, during its retention; and the quiet requests during none of the
    `collecting` pauses (the gateway's and the load generator's collectors)."""
    first = ran[0] if ran else None
    out: dict[str, list[float]] = {
        "quiet": [],
        "quiet, no collector pause": [],
        "housekeeping": [],
        "rolling up a bucket": [],
        "starting the upkeep process": [],
        "first run": [],
        "retention": [],
    }
    begin = samples[0][0] + skip_s if samples else 0.0
    for due, done, ok in samples:
        if not ok or due < begin:
            continue
        ms = 1e3 * (done - due)
        hit = [r for r in ran if due < r.end and done > r.start]
        if not hit:
            out["quiet"].append(ms)
            if not any(due < b and done > a for a, b in collecting):
                out["quiet, no collector pause"].append(ms)
        elif hit[0] is not first:
            out["housekeeping"].append(ms)
            if hit[0].spawned:
                out["starting the upkeep process"].append(ms)
            elif hit[0].parts.get("rollups", 0.0) >= BUCKET_RUN_S:
                out["rolling up a bucket"].append(ms)
        elif first is not None and done > first.end - first.parts.get("retention", 0.0):
            out["retention"].append(ms)
        else:
            out["first run"].append(ms)
    return out


@contextlib.contextmanager
def store_url(db: str, folder: Path) -> Iterator[str]:
    if db == "postgres":
        from tests.gateway.pg import cluster

        with cluster() as c:
            yield c.url
        return
    yield f"sqlite:///{folder}/records.db"


def prepare(url: str, args: argparse.Namespace, now: float) -> dict[str, int]:
    store = Store(url)
    try:
        rows = {
            "expired day": fill(store, day_start(now) - 31 * DAY, DAY, args.expired_rate),
            "last day": fill(store, now - DAY - args.hot_s, DAY, args.day_rate),
            "hot": fill(store, now - args.hot_s, args.hot_s, args.rate),
        }
    finally:
        store.close()
    return rows


def collector_line(whose: str, spans: list[tuple[float, float]]) -> str:
    if not spans:
        return f"\n{whose} collector: no pause of 2 ms or more.\n"
    ms = sorted(1e3 * (b - a) for a, b in spans)
    return (
        f"\n{whose} collector: {len(ms)} pauses of 2 ms or more, "
        f"median {ms[len(ms) // 2]:.1f} ms, longest {ms[-1]:.1f} ms.\n"
    )


def report(
    args: argparse.Namespace, rows: dict[str, int], by: dict[str, list[float]], ran: list[Run]
) -> str:
    quiet = by["quiet"]
    lines = [
        f"\n### `python bench/housekeeping_latency.py {' '.join(sys.argv[1:])}`\n",
        f"{args.db}; store before: "
        + ", ".join(f"{k} {v:,} rows" for k, v in rows.items())
        + f"; {len(ran)} housekeeping runs: "
        + "; ".join(
            f"{r.end - r.start:.2f} s ("
            + ", ".join(f"{k} {v:.2f}" for k, v in r.parts.items())
            + ")"
            for r in ran[:4]
        )
        + (" …" if len(ran) > 4 else "")
        + "\n",
        "| phase | requests | p50 ms | p99 ms | max ms | p99 − quiet p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    q99 = percentile(quiet, 0.99) if quiet else float("nan")
    for name, ms in by.items():
        if not ms:
            lines.append(f"| {name} | 0 | | | | |")
            continue
        p99 = percentile(ms, 0.99)
        lines.append(
            f"| {name} | {len(ms)} | {percentile(ms, 0.5):.2f} | {p99:.2f} | {max(ms):.2f} | "
            f"{p99 - q99:+.2f} |"
        )
    return "\n".join(lines) + "\n"


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--rate", type=float, default=300.0, help="requests a second")
    ap.add_argument("--seconds", type=float, default=60.0, help="of load")
    ap.add_argument("--interval", type=float, default=3.0, help="housekeeping_interval_s")
    ap.add_argument("--day-rate", type=float, default=10.0)
    ap.add_argument("--expired-rate", type=float, default=10.0)
    ap.add_argument("--hot-s", type=float, default=1800.0)
    ap.add_argument("--skip-s", type=float, default=2.0, help="warm-up left out")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--nice", type=int, help="housekeeping thread's nice (default: shipped)")
    ap.add_argument(
        "--switch-ms",
        type=float,
        help="the gateway process's GIL switch interval (sys.setswitchinterval; default: shipped)",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="leave the rollups' backfill (6 h of buckets a run) to the gateway's housekeeping",
    )
    ap.add_argument(
        "--upkeep",
        choices=("process", "thread"),
        default="thread",
        help="where the store's upkeep runs (store.upkeep_process; shipped: thread)",
    )
    ap.add_argument("--samples", type=Path, help="write each request's due, done, ok here")
    ap.add_argument("--log", type=Path, help="keep the gateway's log here")
    return ap.parse_args()


def serve_and_drive(
    args: argparse.Namespace, url: str, scratch: Path, driver_gc: io.StringIO
) -> tuple[list[tuple[float, float, bool]], str]:
    """The fake and the gateway on `url`, the load through it: the samples, the gateway's log."""
    fake = fake_upstream(scratch)
    try:
        set_fake_default(fake, {"tokens": 16, "realistic": True})
        port = free_port()
        cfg = scratch / "plumbline.toml"
        cfg.write_text(config_toml(port, url, fake, args.interval, args.upkeep == "process"))
        if not args.cold:  # as on a gateway that has run all day: its rollups up to date
            store = Store(url)
            try:
                store.roll_up(load_config(cfg), time.time(), max_hours=40 * 24)
            finally:
                store.close()
        # --nice: housekeeping's thread at another nice value than shipped (0: as the loop's).
        # --switch-ms: the gateway's GIL switch interval other than shipped.
        pre = (
            ""
            if args.nice is None
            else f"import gateway.edge.housekeeping as h; h.HOUSEKEEPING_NICE = {args.nice}; "
        )
        if args.switch_ms is not None:
            pre += f"import gateway.edge.app as a; a.GIL_SWITCH_S = {args.switch_ms / 1000!r}; "
        pre += gc_watch("sys.stderr")  # the gateway's collections, in its log
        code = pre + "from gateway.cli import app; app()"
        argv = [sys.executable, "-c", code, "serve", "--config", str(cfg)]
        gw = launch(
            "plumbline", argv, f"http://127.0.0.1:{port}/v1", scratch, headers=BENCH_HEADERS
        )
        print(f"gateway pid {gw.pid}", flush=True)
        try:
            samples = asyncio.run(drive(gw.base_url, args.rate, args.seconds, driver_gc))
            time.sleep(0.5)
        finally:
            gw.stop()
        return samples, gw.log.read_text(errors="replace")
    finally:
        fake.stop()


def main() -> None:
    args = options()
    with (
        tempfile.TemporaryDirectory(prefix="plumbline-hkl-") as tmp,
        store_url(args.db, Path(tmp)) as url,
    ):
        t0 = time.perf_counter()
        rows = prepare(url, args, time.time())
        print(f"filled {rows} in {time.perf_counter() - t0:.0f} s", flush=True)
        driver_gc = io.StringIO()
        samples, log = serve_and_drive(args, url, Path(tmp), driver_gc)
    if args.log:
        args.log.write_text(log)
    if args.samples:
        args.samples.write_text("".join(f"{d:.4f}\t{e:.4f}\t{int(ok)}\n" for d, e, ok in samples))
    ran = runs(log)
    failed = sum(1 for s in samples if not s[2])
    mine, theirs = pauses(log), pauses(driver_gc.getvalue())
    text = report(args, rows, phases(samples, ran, args.skip_s, mine + theirs), ran)
    text += collector_line("the gateway's", mine) + collector_line("the load generator's", theirs)
    if failed:
        text += f"\n{failed} of {len(samples)} requests failed.\n"
    print(text)
    with args.out.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
