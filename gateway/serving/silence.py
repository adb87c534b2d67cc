"""Silence: ends relayed streams whose upstream has said nothing for too long.

A read timer re-armed on every block (aiohttp's `sock_read`) was a tenth of the gateway's
event-loop time at 2,048 paced streams (py-spy, `bench/gateway_profile.py --scenario seed`).
Streams are relayed without one: the relay notes when each block arrived, and one sweep per
interval fails the replies that have been silent longer than `server.idle_timeout_s` with a
timeout error, which the relay turns into the stream's closing error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.errors import ReplyTimeout
from gateway.serving.reply import Reply


class Watched:
    __slots__ = ("response", "seen")

    def __init__(self, response: Reply, seen: float):
        self.response = response
        self.seen = seen


class Silence:
    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.interval_s = min(1.0, limit_s / 4)
        self._open: set[Watched] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, response: Reply, first_s: float | None = None) -> Watched:
        """Watch `response`; `first_s`: how long it may take to its first block, where that
        is not the limit (a stream whose head went before its first event)."""
        now = time.perf_counter()
        watched = Watched(response, now if first_s is None else now + first_s - self.limit_s)
        self._open.add(watched)
        return watched

    def forget(self, watched: Watched) -> None:
        self._open.discard(watched)

    def sweep(self, now: float) -> int:
        """Fail every stream silent for longer than the limit; how many were."""
        stale = [w for w in self._open if now - w.seen > self.limit_s]
        for watched in stale:
            self._open.discard(watched)
            watched.response.fail(ReplyTimeout(f"no data for {self.limit_s:g}s"))
        return len(stale)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.sweep(time.perf_counter())
            except Exception:  # the sweeper must outlive any one stream
                logging.getLogger("plumbline").exception("silence sweep failed")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
