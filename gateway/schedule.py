"""Scheduled evaluation: every N hours the gateway runs a suite against its own targets.

The runner is the same client `plumbline eval run` uses, pointed at this gateway's own address,
so it measures what users get. Its requests carry the eval lane header (routing keeps them off the
prefix index) and its own concurrency cap, so production traffic never queues behind it. Runs are
written to `[evals].runs_dir`, like manual runs; the latest result per target is kept in memory for
quality-gated decisions and reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger("plumbline.schedule")


class EvalScheduler:
    def __init__(self, gw: Gateway, base_url: str):
        self.gw = gw
        self.base_url = base_url
        self.last_run: Path | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        schedule = self.gw.config.evals
        return schedule.every_hours > 0 and bool(schedule.targets)

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run_once(self) -> Path:
        from evals.runner import RunSpec, Runner

        schedule = self.gw.config.evals
        runs_dir = Path(schedule.runs_dir)
        if not runs_dir.is_absolute():
            runs_dir = self.gw.config.root / runs_dir
        spec = RunSpec(
            base_url=self.base_url, targets=list(schedule.targets), suite=schedule.suite,
            seed=schedule.seed, concurrency=schedule.concurrency, timeout_s=schedule.timeout_s,
            runs_dir=runs_dir,
        )
        self.last_run = await Runner(spec).run()
        log.info("scheduled eval finished: %s", self.last_run)
        return self.last_run

    async def _forever(self) -> None:
        interval = self.gw.config.evals.every_hours * 3600
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except Exception:
                log.exception("scheduled eval failed")
