"""What a request's start and end cost the event loop: `Gateway.begin` and `Gateway.finish`, timed
in process on the gateway `bench/gateway_perf.py` serves (SQLite store with its journal, one
client key, metrics, the watchdog), and each sink's own share.

A stream's start goes to the journal (`Gateway.begin`: its typed row, one line); its end is
priced, annotated and handed to every record sink (`Gateway.finish`: the access settlement, the
record queue's typed row and journal line, the metrics, the watchdog, the upstream errors).
Both run on the event loop, once per stream, while other streams wait: this prints µs per
request for each (the median of `--rounds`, each `--records` fresh records one after another,
as the loop would see them), then per sink, and the CPU the record queue's thread spends a row
(the store's inserts: it holds the GIL, and the loop waits, for the Python part of it).

    python bench/request_close.py --records 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ledger_journal import record  # noqa: E402

from gateway.config import parse_config  # noqa: E402
from gateway.edge.access import Access  # noqa: E402
from gateway.edge.gateway import Gateway  # noqa: E402
from gateway.ledger.record import Record  # noqa: E402
from gateway.ledger.store import Store  # noqa: E402


def gateway(folder: Path) -> Gateway:
    """The gateway `bench/perf_procs.py` configures, with one upstream "a" serving "smol"."""
    config = parse_config(
        {
            "server": {"health_interval_s": 0},
            "access": {"keys": [{"id": "bench", "sha256": "0" * 64, "role": "client"}]},
            "store": {"url": f"sqlite:///{folder}/plumbline.db"},
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
            ],
            "models": {"smol": {"upstreams": ["a"]}},
        },
        root=folder,
    )
    return Gateway(config, store=Store.from_config(config), access=Access(config.access))


def timed(records: list[Record], step: Callable[[Record], None]) -> float:
    """The calling thread's CPU µs per record of `step` over `records`, one after another (its
    CPU time: the record queue's thread holding the GIL meanwhile is not counted here)."""
    clock = time.thread_time
    t = clock()
    for r in records:
        step(r)
    return (clock() - t) / len(records) * 1e6


def run(n: int, rounds: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="plumbline-bench-close-"))
    gw = gateway(folder)
    sinks = {f"  {type(s).__name__}.submit": s.submit for s in gw.sinks}
    names = ("begin", "finish", *sinks, "record queue's thread, per row")
    out: dict[str, list[float]] = {name: [] for name in names}
    for k in range(-1, rounds):  # the first round warms (the metrics' children, the files)
        records = [record((k + 1) * 10 * n + i) for i in range(n)]
        process, thread = time.process_time(), time.thread_time()
        begin, finish = timed(records, gw.begin), timed(records, gw.finish)
        took = {"begin": begin, "finish": finish}
        for i, (name, submit) in enumerate(sinks.items()):
            took[name] = timed([record(((k + 1) * 10 + 1 + i) * n + j) for j in range(n)], submit)
        if gw.queue is not None:
            gw.queue.flush(60)
        # The other threads' CPU (the record queue's: rows to the store, the journal's fsync),
        # a row: two rows a round's record (`finish`, then `RecordQueue.submit` on its own).
        others = (time.process_time() - process) - (time.thread_time() - thread)
        took["record queue's thread, per row"] = others / (2 * n) * 1e6
        if k >= 0:
            for name, us in took.items():
                out[name].append(us)
    asyncio.run(gw.stop())
    return {name: statistics.median(v) for name, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    result = run(args.records, args.rounds)
    print(f"CPU µs per request, median of {args.rounds} rounds of {args.records} records")
    for name, us in result.items():
        print(f"{name:<32} {us:7.1f}")


if __name__ == "__main__":
    main()
