"""The event loop's watch: lag and busy ratio as a loop held by real work shows them, on a bare
loop and on a serving gateway's (its /health and /metrics)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import sys
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.edge.app import create_app
from gateway.serving.loop_watch import LoopWatch
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import config_from, serving_app, wait_for


def _spin(seconds: float) -> None:
    """CPU work on the calling thread (a loop callback that computes instead of waiting)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _run(watch: LoopWatch, work: list[tuple[float, str]]) -> None:
    """Start the watch, then hold the loop for each (seconds, how) in turn, a tick apart."""
    watch.start(asyncio.get_running_loop())
    try:
        for seconds, how in work:
            await asyncio.sleep(2 * watch.period_s)
            (time.sleep if how == "sleep" else _spin)(seconds)
        await asyncio.sleep(2 * watch.period_s)
    finally:
        watch.stop()


def test_a_loop_held_by_work_shows_as_lag_and_busy() -> None:
    registry = CollectorRegistry()
    watch = LoopWatch(registry, period_s=0.05, window_s=60)
    asyncio.run(_run(watch, [(0.3, "spin")]))
    seen = watch.snapshot()
    assert seen["worst_lag_ms"] >= 250  # the tick due during the work ran after it
    assert seen["busy"] > 0.35  # 0.3 s of CPU in about 0.6 s of wall time
    assert registry.get_sample_value("gateway_event_loop_lag_seconds_count") >= 3
    assert registry.get_sample_value("gateway_event_loop_lag_seconds_sum") >= 0.25
    # The late tick is in no bucket up to 0.1 s (on busy cores the 0.3 s of CPU may take more
    # than 0.5 s of wall time, so no upper bucket is asserted).
    assert registry.get_sample_value("gateway_event_loop_lag_seconds_bucket", {"le": "0.1"}) < (
        registry.get_sample_value("gateway_event_loop_lag_seconds_count")
    )


def _held_by_a_lock(lock: threading.Lock) -> None:
    """A loop callback that waits on a lock another thread holds (as one that waits on a
    database's write lock would)."""
    with lock:
        pass


def test_a_stalled_loop_is_said_with_where_it_is(caplog: pytest.LogCaptureFixture) -> None:
    """Held a second and more at once, the loop is said to be stalled, with its thread's stack
    at that moment naming what holds it; once a stall, and a short hold is not one."""
    lock = threading.Lock()

    async def main(watch: LoopWatch) -> None:
        watch.start(asyncio.get_running_loop())
        try:
            await asyncio.sleep(0.1)
            _spin(0.1)  # short of the stall: not said
            lock.acquire()
            releaser = threading.Timer(1.5, lock.release)
            releaser.name = "releaser"
            releaser.start()
            _held_by_a_lock(lock)
            await asyncio.sleep(0.2)
        finally:
            watch.stop()

    watch = LoopWatch(CollectorRegistry(), period_s=0.05, window_s=60, stall_s=0.5)
    with caplog.at_level(logging.WARNING, logger="plumbline"):
        asyncio.run(main(watch))
    said = [r.getMessage() for r in caplog.records if "has been held" in r.getMessage()]
    assert len(said) == 1, said
    assert "_held_by_a_lock" in said[0] and "with lock" in said[0]
    # The other threads, each where it is: the one that holds the lock, waiting to let go.
    assert "releaser: " in said[0].split("the other threads")[1]
    assert "_spin" not in said[0]


def test_a_loop_stall_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    watch = LoopWatch(registry, period_s=0.05, window_s=60, stall_s=0.5)
    asyncio.run(_run(watch, [(0.8, "sleep")]))  # time.sleep lets the GIL go: the watch runs
    assert registry.get_sample_value("gateway_event_loop_stalls_total", {"held": "loop"}) == 1
    assert registry.get_sample_value("gateway_event_loop_stalls_total", {"held": "process"}) is None


def _hold_the_gil_in_the_kernel(seconds: float) -> None:
    """A C call that waits in the kernel without letting the GIL go (as a thread does in a page
    fault on a busy disk): libc's usleep through ctypes.PyDLL, which keeps the GIL held."""
    ctypes.PyDLL(None).usleep(int(seconds * 1e6))


def test_a_whole_process_held_is_said_as_such(caplog: pytest.LogCaptureFixture) -> None:
    """With the GIL held through a wait, no thread of the process runs Python, the watch's own
    included: the stall is said once as the whole process's, with the CPU it used (none
    here), not as a stack of the loop's that names nothing."""

    async def main(watch: LoopWatch) -> None:
        watch.start(asyncio.get_running_loop())
        try:
            await asyncio.sleep(0.1)
            _hold_the_gil_in_the_kernel(1.2)
            await asyncio.sleep(0.3)
        finally:
            watch.stop()

    registry = CollectorRegistry()
    watch = LoopWatch(registry, period_s=0.05, window_s=60, stall_s=0.5)
    with caplog.at_level(logging.WARNING, logger="plumbline"):
        asyncio.run(main(watch))
    said = [r.getMessage() for r in caplog.records if "held" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("the whole process was held for ")
    held = float(said[0].removeprefix("the whole process was held for ").split(" s,")[0])
    assert held >= 1.0  # the 1.2 s wait, less the watch's own 0.125 s step (no upper bound)
    used = float(said[0].split("it used ")[1].split(" s of CPU")[0])
    assert used < 0.5
    if sys.platform == "linux":
        assert "waiting for disks" in said[0] and "stolen by the hypervisor" in said[0]
    assert registry.get_sample_value("gateway_event_loop_stalls_total", {"held": "process"}) == 1
    assert registry.get_sample_value("gateway_event_loop_stalls_total", {"held": "loop"}) is None
    assert watch.snapshot()["stalls"] == {"loop": 0, "process": 1}


def test_a_loop_that_waits_is_late_but_not_busy() -> None:
    """A blocking wait (a sleep: no CPU) delays the loop as much, but is no load: only the lag
    says it."""
    watch = LoopWatch(CollectorRegistry(), period_s=0.05, window_s=60)
    asyncio.run(_run(watch, [(0.3, "sleep")]))
    seen = watch.snapshot()
    assert seen["worst_lag_ms"] >= 250
    assert seen["busy"] < 0.3


async def _busy(watch: LoopWatch, seconds: float) -> None:
    """Work in 2 ms slices with the loop free between them: busy, but no timer waits long."""
    watch.start(asyncio.get_running_loop())
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            _spin(0.002)
            await asyncio.sleep(0)
    finally:
        watch.stop()


def test_a_busy_window_is_warned_of_once(caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopWatch(CollectorRegistry(), period_s=0.05, window_s=0.4, warn_busy=0.5)
    with caplog.at_level(logging.WARNING, logger="plumbline"):
        asyncio.run(_busy(watch, 1.5))
    seen = watch.snapshot()
    assert seen["busy"] > 0.5 and seen["mean_lag_ms"] < 25  # the busy ratio's warning alone
    warned = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "busy over the last" in warned[0] and "workers" in warned[0]


def test_a_loop_late_without_load_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """Timers late on average (a loop that shares its core, or blocks) are warned of even where
    the loop's own CPU is low."""
    watch = LoopWatch(CollectorRegistry(), period_s=0.05, window_s=0.4, warn_busy=0.9)
    with caplog.at_level(logging.WARNING, logger="plumbline"):
        asyncio.run(_run(watch, [(0.3, "sleep")] * 3))
    warned = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "ms late on average" in warned[0]


def test_a_quiet_loop_is_not_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopWatch(CollectorRegistry(), period_s=0.05, window_s=0.4, warn_busy=0.5)
    with caplog.at_level(logging.WARNING, logger="plumbline"):
        asyncio.run(_run(watch, [(0.0, "sleep")] * 10))
    assert watch.snapshot()["window_s"] >= 0.4
    assert not [r for r in caplog.records if "event loop" in r.getMessage()]


def test_a_gateway_reports_its_loop_on_health_and_metrics(fake: FakeHandle) -> None:
    """1.2 s of work put on a serving gateway's loop shows on /health and /metrics (a tick is
    due every 0.5 s: one falls due in the work's first half and runs at its end)."""
    config = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}],
            "models": {"smol": {"upstreams": ["a"]}},
        }
    )
    app = create_app(config)
    with serving_app(app) as root, httpx.Client(base_url=root, timeout=30) as client:
        gw = app.state.gateway
        wait_for(lambda: client.get("/health").json()["event_loop"]["busy"] is not None, 10)
        quiet = client.get("/health").json()["event_loop"]
        assert 0 <= quiet["busy"] < 0.5 and quiet["worst_lag_ms"] < 500
        assert quiet["stalls"] == {"loop": 0, "process": 0}
        gw.loop.call_soon_threadsafe(_spin, 1.2)
        wait_for(lambda: client.get("/health").json()["event_loop"]["worst_lag_ms"] >= 600, 10)
        busy = client.get("/health").json()["event_loop"]
        assert busy["busy"] > quiet["busy"]
        metrics = client.get("/metrics").text
        assert "gateway_event_loop_busy_ratio " in metrics
        lags = [
            ln for ln in metrics.splitlines() if ln.startswith("gateway_event_loop_lag_seconds_")
        ]
        assert any(ln.startswith('gateway_event_loop_lag_seconds_bucket{le="1.0"}') for ln in lags)
        resp = client.post("/v1/embeddings", json={"model": "smol", "input": "x"})
        assert resp.status_code == 200  # and the gateway serves on
