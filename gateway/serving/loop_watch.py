"""How busy this process's event loop is: the figure that says when to run more workers.

A gateway process relays every request on one event loop, so on one core. Past a certain load
(on the 16-core host of `bench/results/`, about 2,000 paced streams at once, with the loop near
two-thirds busy relaying and a wave of new streams arriving) new requests wait for the loop:
first chunks come late, chunks/s falls behind what the upstreams send, and nothing else says
why. The watch is a timer on the loop, every `period_s`:

- **lag**: how late the timer ran, the time the loop spent on other callbacks first:
  `gateway_event_loop_lag_seconds` (a histogram);
- **busy**: the loop thread's CPU time over the wall time since the last tick
  (`time.thread_time`: the loop's own work, not the record queue's or other threads'):
  `gateway_event_loop_busy_ratio`, one series per worker process with `--workers`.

`/health` shows the last minute (`event_loop`: busy ratio, worst and mean lag). A minute at
`warn_busy` (0.75) or more, or with the timers `warn_lag_s` (25 ms) late on average, is logged
as a warning (at most once every ten minutes), saying to run more workers. The lag matters
where the loop shares its cores: on 2 cores busy with a load generator too
(`bench/loop_watch.py`), 256 clients kept the loop only 0.69 busy while its timers ran 42 ms
late on average. On the 16-core host the loop averaged 0.70 busy over two waves of 2,048
streams, which came 4-7% behind direct with first chunks 0.6-0.8 s later at the p99. A tick
costs a few microseconds; two a second cost nothing measurable.

A loop held at once for `stall_s` (1 s) or more is a fault, not load: something ran on it that
should not (a blocking call, a lock, C code holding the GIL in another thread). A thread of the
watch's own notices it while it lasts and logs where the loop thread is at that moment (its
stack) and where each other thread is (its innermost frame: one of them may hold the GIL), at
most once every `stall_every_s`, so the log names the culprit, not only the delay. In the test
suite, where gateways run in the test's process, it named a test's own full collection.

When that thread was held as long as the loop, no Python ran anywhere in the process, and the
loop's stack afterwards names nothing. The watch says so instead, with what tells the causes
apart: the process's CPU over the gap (near the gap's length: C code held the GIL and computed;
near none: a thread held the GIL while it waited in the kernel, a page fault on a busy disk, or
the process or the whole machine was paused), and the machine's CPU time over it waiting for
disks and stolen by its hypervisor (`/proc/stat`, Linux). Both kinds are counted:
`gateway_event_loop_stalls_total{held="loop"|"process"}`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger("plumbline")

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
WARN_EVERY_S = 600.0
STALL_FRAMES = 24  # the innermost frames of a stalled loop's stack that are logged


class LoopWatch:
    """The event loop's lag and busy ratio (see the module): started on the loop it watches."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        period_s: float = 0.5,
        window_s: float = 60.0,
        warn_busy: float = 0.75,
        warn_lag_s: float = 0.025,
        stall_s: float = 1.0,
        stall_every_s: float = 60.0,
    ) -> None:
        self.period_s, self.window_s = period_s, window_s
        self.warn_busy, self.warn_lag_s = warn_busy, warn_lag_s
        self.stall_s, self.stall_every_s = stall_s, stall_every_s
        self.lag = Histogram(
            "gateway_event_loop_lag_seconds",
            "How late a timer on the gateway's event loop ran, checked every "
            f"{period_s:g}s: time the loop spent on other work first.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.busy = Gauge(
            "gateway_event_loop_busy_ratio",
            "The event loop thread's CPU time over wall time since the last check (one core "
            "at 1.0; with several workers, one series each, labelled pid): from about 0.7, "
            "bursts of new requests wait for the loop; run more workers.",
            multiprocess_mode="liveall",
            registry=registry,
        )
        self.stalls = Counter(
            "gateway_event_loop_stalls",
            f"Times the event loop was held {stall_s:g}s or more at once: by code on it or a "
            "lock it waited on (held=loop), or with the whole process held, no Python running "
            "in it (held=process: a GIL held in C or in the kernel, or the machine paused); "
            "each is logged with what held it.",
            ["held"],
            registry=registry,
        )
        # (wall, loop CPU, lag) per tick, for the last `window_s`.
        self._ticks: collections.deque[tuple[float, float, float]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._due_mono = 0.0
        self._warned_at = -WARN_EVERY_S
        # The stall watch: the loop thread, the monotonic time its timer was last due.
        self._loop_thread = 0
        self._stopped = threading.Event()
        self._stall_thread: threading.Thread | None = None
        self.stalled = {"loop": 0, "process": 0}  # since start, by what was held (`stalls`)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start on `loop`, from its own thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._ticks.append((loop.time(), time.thread_time(), 0.0))
        self._schedule(loop.time())
        self._stopped.clear()
        self._stall_thread = threading.Thread(
            target=self._watch_stalls, name="plumbline-loop-stalls", daemon=True
        )
        self._stall_thread.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._stopped.set()
        self._stall_thread = None

    def _watch_stalls(self) -> None:
        """In its own thread: while the loop's timer is `stall_s` overdue, say where the loop
        thread is (once a stall, at most every `stall_every_s`)."""
        said_at = -self.stall_every_s
        reported = 0.0  # the due time of the stall last said
        step = min(0.25, self.stall_s / 4)
        woke, cpu, machine = time.monotonic(), time.process_time(), _machine()
        while not self._stopped.wait(step):
            due, now = self._due_mono, time.monotonic()
            held = now - woke - step  # this thread's own wait overran by that much
            woke, cpu_before, cpu = now, cpu, time.process_time()
            machine_before, machine = machine, _machine()
            if held >= self.stall_s:
                self._stalled("process")
                if now - due >= self.stall_s:
                    reported = due  # the loop's stall is this one: not said again below
                if now - said_at >= self.stall_every_s:
                    said_at = now
                    _say_frozen(held, cpu - cpu_before, machine_before, machine)
                continue
            if now - due < self.stall_s or due == reported:
                continue
            reported = due
            self._stalled("loop")
            if now - said_at < self.stall_every_s:
                continue
            frames = sys._current_frames()
            frame = frames.get(self._loop_thread)
            if frame is None:
                continue
            said_at = now
            where = "".join(traceback.format_stack(frame, limit=STALL_FRAMES)).rstrip()
            log.warning(
                "the event loop has been held for %.1f s so far, every request on this process "
                "waiting; where it is (a stack that ends in the loop's own run: in its C code, "
                "waiting for the kernel or for the GIL another thread holds):\n%s\nthe other "
                "threads, where each is:\n%s",
                now - due,
                where,
                _elsewhere(frames, (self._loop_thread, threading.get_ident())),
            )

    def _stalled(self, held: str) -> None:
        self.stalled[held] += 1
        self.stalls.labels(held).inc()

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.period_s
        self._due_mono = time.monotonic() + self.period_s  # the stall watch's clock
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now, cpu = self._loop.time(), time.thread_time()
        lag = max(0.0, now - self._due)
        last_wall, last_cpu, _ = self._ticks[-1]
        if now > last_wall:
            self.busy.set(min(1.0, (cpu - last_cpu) / (now - last_wall)))
        self.lag.observe(lag)
        ticks = self._ticks
        ticks.append((now, cpu, lag))
        while len(ticks) > 2 and ticks[1][0] <= now - self.window_s:
            ticks.popleft()
        self._schedule(now)
        self._warn(now)

    def snapshot(self) -> dict[str, Any]:
        """The last window (`/health`'s `event_loop`): busy ratio, worst and mean lag; and the
        stalls since start, by what was held."""
        ticks, stalls = list(self._ticks), dict(self.stalled)
        if len(ticks) < 2:
            return {
                "busy": None,
                "worst_lag_ms": None,
                "mean_lag_ms": None,
                "window_s": 0.0,
                "stalls": stalls,
            }
        (wall0, cpu0, _), (wall1, cpu1, _) = ticks[0], ticks[-1]
        lags = [t[2] for t in ticks[1:]]
        span = wall1 - wall0
        return {
            "busy": round(min(1.0, (cpu1 - cpu0) / span), 3) if span > 0 else None,
            "worst_lag_ms": round(1e3 * max(lags), 1),
            "mean_lag_ms": round(1e3 * sum(lags) / len(lags), 2),
            "window_s": round(span, 1),
            "stalls": stalls,
        }

    def _warn(self, now: float) -> None:
        """A full window at `warn_busy` or more, or with timers `warn_lag_s` late on average:
        said once, then at most every WARN_EVERY_S."""
        if now - self._warned_at < WARN_EVERY_S or now - self._ticks[0][0] < 0.9 * self.window_s:
            return
        seen = self.snapshot()
        if seen["busy"] is None or (
            seen["busy"] < self.warn_busy and seen["mean_lag_ms"] < 1e3 * self.warn_lag_s
        ):
            return
        self._warned_at = now
        log.warning(
            "the event loop was %.0f%% busy over the last %.0fs, its timers %.0f ms late on "
            "average (worst %.0f ms): requests wait for it; run more workers ([server].workers, "
            "plumbline serve --workers N)",
            100 * seen["busy"],
            seen["window_s"],
            seen["mean_lag_ms"],
            seen["worst_lag_ms"],
        )


def _machine() -> tuple[float, float] | None:
    """The machine's CPU seconds so far (summed over its CPUs) waiting for disks and stolen by
    its hypervisor (`/proc/stat`'s iowait and steal), or None where there is no such file."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[5]) / tick, int(fields[8]) / tick
    except (OSError, ValueError, IndexError):
        return None


def _say_frozen(
    held: float,
    cpu: float,
    before: tuple[float, float] | None,
    after: tuple[float, float] | None,
) -> None:
    """The warning for a gap in which no Python ran in the process (see the module)."""
    machine = ""
    if before is not None and after is not None:
        machine = (
            f"; the machine's CPUs meanwhile spent {after[0] - before[0]:.1f} s waiting for "
            f"disks and had {after[1] - before[1]:.1f} s stolen by the hypervisor (summed over "
            f"{os.cpu_count()} CPUs)"
        )
    log.warning(
        "the whole process was held for %.1f s, the event loop and every other thread: no "
        "Python ran in it, and it used %.1f s of CPU%s. Not code on the event loop: a thread "
        "held the GIL in C code (using CPU) or while it waited in the kernel (a page fault on "
        "a busy disk), or the process or the machine was paused (no CPU used)",
        held,
        cpu,
        machine,
    )


def _elsewhere(frames: dict[int, Any], skip: tuple[int, ...]) -> str:
    """A line a thread not in `skip`: its name and innermost Python frame."""
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = []
    for ident, frame in frames.items():
        if ident in skip:
            continue
        code = frame.f_code
        name = names.get(ident, str(ident))
        lines.append(f"  {name}: {code.co_filename}:{frame.f_lineno} in {code.co_name}")
    return "\n".join(lines) or "  (none)"
