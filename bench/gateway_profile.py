"""Profile our gateway's hot path: py-spy samples ``plumbline serve`` while a scenario drives it.

    python bench/gateway_profile.py --scenario stream-c32 --seconds 10
    python bench/gateway_profile.py --scenario nonstream-c1 --flame bench/results/nonstream.svg

Starts the fake upstream and the gateway (as bench/gateway_perf.py does), runs
``py-spy record --format raw`` on the gateway for the scenario's length, and prints the functions
with the most samples (own time and total time). Needs ``pip install py-spy`` and the right to
ptrace the gateway (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_perf import LOGPROBS, SCENARIOS, TEXTS  # noqa: E402
from perf_procs import MODEL, fake_upstream, plumbline, set_fake_default  # noqa: E402

from plumbline_kit.loadgen.scenario import drive  # noqa: E402


def _function(frame: str) -> str:
    """``f (file.py:12)`` → ``f (file.py)``: samples summed over a function's lines."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else frame


def top(raw: Path, n: int) -> str:
    """The `n` functions with the most own and total samples on the event loop's thread.

    Stacks that do not pass through the asyncio runner (worker threads, mostly idle) are left out.
    """
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        k = int(count)
        frames = [_function(f) for f in stack.split(";")]
        if not any(f.startswith("Runner.run ") for f in frames):
            continue
        samples += k
        own[frames[-1]] += k
        for frame in set(frames):
            total[frame] += k
    lines = [f"{samples} samples on the event loop", "-- own --"]
    lines += [f"{100 * c / samples:5.1f}%  {f}" for f, c in own.most_common(n)]
    lines += ["-- total --"] + [f"{100 * c / samples:5.1f}%  {f}" for f, c in total.most_common(n)]
    return "\n".join(lines)


async def run(
    scenario: str,
    seconds: float,
    flame: Path | None,
    workdir: Path,
    n: int,
    keep: Path | None,
    text: str = "realistic",
) -> None:
    sc = SCENARIOS[scenario]
    fake = fake_upstream(workdir)
    gw = plumbline(fake, workdir)
    try:
        realistic = True if text == "realistic" else None
        set_fake_default(
            fake, {"tokens": sc.tokens, "pace_tps": sc.pace_tps, "realistic": realistic}
        )
        raw = workdir / "profile.txt"
        spy = ["py-spy", "record", "-p", str(gw.pid), "-d", str(int(seconds)), "-r", "200"]
        recorder = subprocess.Popen([*spy, "--format", "raw", "-o", str(raw)])
        await asyncio.sleep(1.0)
        url = gw.base_url + "/chat/completions"
        extra = LOGPROBS if realistic else None
        await drive(url, sc, MODEL, seconds - 1.5, gw.headers, warmup=0, extra=extra)
        recorder.wait(60)
        print(top(raw, n))
        if keep:
            keep.write_text(raw.read_text())
        if flame:
            subprocess.run([*spy, "-o", str(flame)], check=False)
    finally:
        gw.stop()
        fake.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="stream-c32", choices=sorted(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--flame", type=Path, help="also write a flame graph SVG here (a second run)")
    ap.add_argument("--raw", type=Path, help="also keep the raw stacks (py-spy --format raw) here")
    ap.add_argument("--text", choices=TEXTS, default="realistic", help="as gateway_perf.py's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="plumbline-prof-") as tmp:
        asyncio.run(
            run(args.scenario, args.seconds, args.flame, Path(tmp), args.top, args.raw, args.text)
        )


if __name__ == "__main__":
    main()
