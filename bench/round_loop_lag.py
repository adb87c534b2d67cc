"""How late the serving event loop runs while a gateway makes its first scheduled gate round.

    python bench/round_loop_lag.py --runs 3                   # this checkout
    python bench/round_loop_lag.py --runs 3 --tree /tmp/old   # another checkout, for a before

Each run is a fresh process (so the round's imports are cold, as in a gateway's first round):
two fake upstreams, a gateway in front of them with one gated route and a smoke-suite round (the
gate's end-to-end tests' config, `tests/gateway/trust/gated.py`), and a probe on the gateway's
loop that sleeps 5 ms at a time and keeps its worst overshoot. While the probe is late, a thread
samples the loop thread's stack; the most frequent ones are printed with the worst lag and the
round's length.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STALE_S = 0.03  # a probe this late has its stack sampled


def one_round() -> None:
    """In this process: the round, the worst lag, the stacks seen while the loop was late."""
    from plumbline_kit.fakes.upstream import running_fake
    from tests.harness import serving

    # This checkout's file, also where `--tree` names an older checkout without it.
    where = importlib.util.spec_from_file_location("gated", ROOT / "tests/gateway/trust/gated.py")
    assert where is not None and where.loader is not None
    gated = importlib.util.module_from_spec(where)
    where.loader.exec_module(gated)

    tick = [time.perf_counter()]
    stacks: collections.Counter[str] = collections.Counter()

    async def probe(stop: asyncio.Event) -> float:
        worst = 0.0
        while not stop.is_set():
            tick[0] = t = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - t - 0.005)
        return worst

    def sample(loop_thread: int, done: threading.Event) -> None:
        while not done.wait(0.01):
            frame = sys._current_frames().get(loop_thread)
            if frame is not None and time.perf_counter() - tick[0] > STALE_S:
                names = []
                while frame is not None and len(names) < 6:
                    names.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")
                    frame = frame.f_back
                stacks[" < ".join(names)] += 1

    async def ident() -> int:
        return threading.get_ident()

    with (
        tempfile.TemporaryDirectory(prefix="plumbline-round-") as scratch,
        running_fake(tokens=6) as a,
        running_fake(tokens=6, finish_reason="length") as b,
        serving(gated.gated_config(a.base_url, b.base_url, Path(scratch)), own_port=True) as (
            _,
            app,
        ),
    ):
        gw = app.state.gateway
        done, stop = threading.Event(), asyncio.Event()
        loop_thread = asyncio.run_coroutine_threadsafe(ident(), gw.loop).result(10)
        threading.Thread(target=sample, args=(loop_thread, done), daemon=True).start()
        lag = asyncio.run_coroutine_threadsafe(probe(stop), gw.loop)
        t0 = time.perf_counter()
        asyncio.run_coroutine_threadsafe(gw.scheduler.run_gate("smol"), gw.loop).result(300)
        took = time.perf_counter() - t0
        gw.loop.call_soon_threadsafe(stop.set)
        worst = lag.result(10)
        done.set()
    print(f"round {took:.2f} s, worst loop lag {1000 * worst:.0f} ms")
    for stack, n in stacks.most_common(4):
        print(f"  {n:3d} × {stack}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tree", type=Path, help="another checkout to run the gateway from")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a run's own process
    args = ap.parse_args()
    if args.one:
        one_round()
        return
    tree = (args.tree or ROOT).resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT / "kit")])}
    for _ in range(args.runs):
        me = [sys.executable, str(Path(__file__).resolve()), "--one"]
        subprocess.run(me, cwd=tree, env=env, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
