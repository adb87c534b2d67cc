"""The rollup's Python work: what the housekeeping thread holds the GIL for.

On PostgreSQL the rollup's database work runs in the server, so the thread's own CPU time
(`time.thread_time()`) is the Python work that the event loop waits on. This generates `--hours`
of requests at `--rate` inside a throwaway PostgreSQL (`bench/month_gen.py`), then times
`Store.roll_up` over them (the backfill) and the next tick, wall and Python CPU:

    python bench/rollup_gil.py --hours 2 --rate 300
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from month_gen import config, generate_span  # noqa: E402
from month_store import END  # noqa: E402

from gateway.ledger.store import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=int, default=2)
    ap.add_argument("--rate", type=float, default=300.0)
    args = ap.parse_args()
    from tests.gateway.pg import cluster

    with cluster() as c:
        store = Store(c.url)
        generate_span(store, END - args.hours * 3600, args.hours * 3600, args.rate)
        for label, now in (("backfill", END + 600), ("next tick", END + 1200)):
            t0, c0 = time.perf_counter(), time.thread_time()
            n = store.roll_up(config(), now, max_hours=100)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            print(f"{label}: rolled {n}, wall {wall:.2f} s, Python CPU {cpu:.3f} s", flush=True)
        store.close()


if __name__ == "__main__":
    main()
