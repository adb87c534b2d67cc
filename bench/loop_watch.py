"""What the event loop's watch reads, against the loop's CPU measured from outside.

`gateway/serving/loop_watch.py` publishes `gateway_event_loop_busy_ratio` (the loop thread's CPU
over wall time, every 0.5 s) and `gateway_event_loop_lag_seconds`. This drives one gateway with
the fake upstream at a few loads (`--loads`: streamed requests, 16 tokens unpaced, N clients
looping; 0 = idle), and for each compares:

- the gauge, read from /metrics every 0.5 s during the load, averaged;
- the main thread's CPU time from /proc (`perf_procs.loop_seconds`) over the load's wall time;
- the lag histogram's mean and the share of ticks later than 10 ms, from the load's samples.

    python bench/loop_watch.py --seconds 8 --loads 0,4,16,64,256

Prints a Markdown table; appends it to `--out` when given.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import (  # noqa: E402
    MODEL,
    Proc,
    fake_upstream,
    loop_seconds,
    plumbline,
    set_fake_default,
)

from plumbline_kit.loadgen.scenario import Scenario, drive  # noqa: E402


def _series(text: str) -> dict[str, float]:
    """The watch's samples in a /metrics text: the unlabelled ones by name, and the lag
    histogram's 10 ms bucket as `…_bucket@0.01` (prometheus-client's own parser)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("gateway_event_loop_"):
            continue
        for sample in family.samples:
            if not sample.labels:
                out[sample.name] = sample.value
            elif sample.labels.get("le") == "0.01":
                out[sample.name + "@0.01"] = sample.value
    return out


async def _sample(url: str, headers: dict[str, str], until: float, out: list[float]) -> None:
    async with httpx.AsyncClient(headers=headers, timeout=5) as client:
        while time.perf_counter() < until:
            await asyncio.sleep(0.5)
            got = _series((await client.get(url)).text)
            out.append(got.get("gateway_event_loop_busy_ratio", float("nan")))


async def one_load(gw: Proc, clients: int, seconds: float) -> dict[str, float]:
    base, headers = gw.base_url, dict(gw.headers)
    metrics = base.removesuffix("/v1") + "/metrics"
    before = _series(httpx.get(metrics, headers=headers).text)
    cpu0, t0 = loop_seconds(gw.pid), time.perf_counter()
    gauge: list[float] = []
    sampler = asyncio.create_task(_sample(metrics, headers, t0 + seconds, gauge))
    requests = 0
    if clients:
        sc = Scenario(f"c{clients}", clients, True, 16)
        tally = await drive(base + "/chat/completions", sc, MODEL, seconds, headers, warmup=0)
        requests = tally.requests
    await sampler
    wall, cpu = time.perf_counter() - t0, loop_seconds(gw.pid) - cpu0
    after = _series(httpx.get(metrics, headers=headers).text)
    ticks = (
        after["gateway_event_loop_lag_seconds_count"]
        - before["gateway_event_loop_lag_seconds_count"]
    )
    lag = after["gateway_event_loop_lag_seconds_sum"] - before["gateway_event_loop_lag_seconds_sum"]
    late = ticks - (
        after["gateway_event_loop_lag_seconds_bucket@0.01"]
        - before["gateway_event_loop_lag_seconds_bucket@0.01"]
    )
    # The first samples may straddle the load's start: the average leaves out the first one.
    shown = gauge[1:] or gauge
    return {
        "clients": clients,
        "req_s": requests / wall,
        "gauge": sum(shown) / len(shown),
        "proc": cpu / wall,
        "lag_mean_ms": 1e3 * lag / max(ticks, 1),
        "late_share": late / max(ticks, 1),
    }


async def run(loads: list[int], seconds: float, scratch: Path) -> list[dict[str, float]]:
    fake = fake_upstream(scratch)
    gw = plumbline(fake, scratch)
    try:
        set_fake_default(fake, {"tokens": 16, "pace_tps": None})
        return [await one_load(gw, n, seconds) for n in loads]
    finally:
        gw.stop()
        fake.stop()


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| clients | requests/s | busy (the gauge) | busy (/proc, main thread) | lag mean "
        "| ticks > 10 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']:.0f} | {r['req_s']:.0f} | {r['gauge']:.3f} | {r['proc']:.3f} | "
            f"{r['lag_mean_ms']:.1f} ms | {100 * r['late_share']:.0f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--loads", default="0,4,16,64,256")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    loads = [int(x) for x in args.loads.split(",")]
    with tempfile.TemporaryDirectory(prefix="plumbline-loopwatch-") as tmp:
        rows = asyncio.run(run(loads, args.seconds, Path(tmp)))
    text = table(rows)
    print(text)
    if args.out:
        with args.out.open("a") as fh:
            fh.write(f"\n{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n\n{text}\n")


if __name__ == "__main__":
    main()
