"""What the crash-safe ledger costs a request: `RecordQueue.submit` timed on the request path.

`submit` makes the record's typed row (`gateway/ledger/columns.py`), appends it to the
process's journal (`gateway/ledger/journal.py`) and queues it; the queue's thread writes
batches to a SQLite store as the gateway does. Three ways, the same records:

    off        no journal: typed row + queue (what a SIGKILL could lose: the unwritten batch)
    interval   the journal's write(2) on the request path, fsync by the queue's thread (default)
    always     write(2) + fdatasync on the request path (store.journal_fsync = "always")

For each: the time `submit` takes per record (mean, p50, p99, of `--records` calls made one
after another, as one event loop would), and how long the queue then takes to have every row
in the store. Also the bare fdatasync latency of the folder's disk, for scale.

    python bench/ledger_journal.py --records 20000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gateway.ledger.record import Attempt, Record
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store


def record(i: int) -> Record:
    """A record as a finished streamed chat request leaves it (every column set)."""
    return Record(
        request_id=f"req-{i:024x}",
        door="chat",
        model="smol",
        stream=True,
        key_id="team",
        upstream="a",
        engine="vllm 0.32.0 template c410ab55bc15",
        shape="default",
        attempts=[Attempt("a", "ok", 200, 0.5)],
        status=200,
        finish_reason="stop",
        max_tokens=256,
        prompt_tokens=120,
        completion_tokens=64,
        queue_s=0.001,
        ttft_s=0.2,
        ttfa_s=0.2,
        e2e_s=1.4,
        itl_mean_s=0.02,
        itl_p99_s=0.05,
        chunks=64,
        cost_usd=0.0001,
        params_hash="abc123",
    )


def run(mode: str, n: int, folder: Path) -> dict[str, float]:
    store = Store("sqlite:///bench.db", root=folder)
    q = RecordQueue(
        store,
        folder / "spool",
        journal=mode != "off",
        journal_fsync="always" if mode == "always" else "interval",
    )
    records = [record(i) for i in range(n)]
    took = []
    clock = time.perf_counter
    for r in records:
        t = clock()
        q.submit(r)
        took.append(clock() - t)
    start = clock()
    q.flush(timeout=300)
    drained = clock() - start
    q.close()
    rows = store.count()
    store.close()
    took.sort()
    return {
        "mean_us": statistics.fmean(took) * 1e6,
        "p50_us": took[len(took) // 2] * 1e6,
        "p99_us": took[int(len(took) * 0.99)] * 1e6,
        "drain_s": drained,
        "rows": rows,
    }


def fsync_latency(folder: Path, n: int = 200) -> float:
    fd = os.open(folder / "fsync.probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        took = []
        for _ in range(n):
            os.write(fd, b"x" * 700 + b"\n")
            t = time.perf_counter()
            os.fdatasync(fd)
            took.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return statistics.median(took) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3, help="each visits every mode in turn")
    ap.add_argument("--folder", type=Path, default=None, help="where the store and spool go")
    args = ap.parse_args()
    base = args.folder or Path(tempfile.mkdtemp(prefix="plumbline-bench-journal-"))
    print(f"fdatasync of one 700-byte line, median: {fsync_latency(base):.0f} us")
    modes = ("off", "interval", "always")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for k in range(args.rounds):
        for mode in modes:
            folder = base / f"{mode}-{k}"
            folder.mkdir(parents=True, exist_ok=True)
            runs[mode].append(run(mode, args.records, folder))
    print(f"median of {args.rounds} rounds, {args.records} records each")
    print(f"{'mode':<9} {'mean us':>8} {'p50 us':>7} {'p99 us':>7} {'drain s':>8} {'rows':>6}")
    for mode in modes:
        m = {key: statistics.median(r[key] for r in runs[mode]) for key in runs[mode][0]}
        print(
            f"{mode:<9} {m['mean_us']:8.1f} {m['p50_us']:7.1f} {m['p99_us']:7.1f} "
            f"{m['drain_s']:8.2f} {m['rows']:6.0f}"
        )


if __name__ == "__main__":
    main()
