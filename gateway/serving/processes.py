"""The local engine processes behind some upstreams, as the supervisor that started them sees
them: what routing and ``/health`` read.

Under `plumbline up` the supervisor (`deploy.supervisor`) watches each engine it launched and
restarts one that exits while serving. The gateway gets a narrow read of it, by upstream name
(`deploy.launch.LocalEngines`): each engine's ``state`` (running, restarting, down, stopped),
``restarts`` and ``last_exit``. A change is pushed from the supervisor's thread; the gateway
takes it up on its event loop: an engine that is not running is unhealthy at once (not at the
next probe), and healthy again once restarted (its supervisor saw every health path answer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

EngineView = Mapping[str, Any]


class EngineProcesses(Protocol):
    """What `create_app(processes=...)` takes."""

    def snapshot(self) -> Mapping[str, EngineView]: ...

    def subscribe(self, callback: Callable[[str, EngineView], None]) -> None: ...

    def unsubscribe(self, callback: Callable[[str, EngineView], None]) -> None: ...


class ProcessHealth:
    """Applies engine states to upstream health through `set_health(upstream, ok)`."""

    def __init__(
        self, processes: EngineProcesses | None, set_health: Callable[[str, bool], None]
    ) -> None:
        self.processes = processes
        self.set_health = set_health
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.processes is None:
            return
        self.loop = loop
        self.processes.subscribe(self._changed)
        for upstream, view in self.processes.snapshot().items():
            self._apply(upstream, view)

    def stop(self) -> None:
        if self.processes is not None:
            self.processes.unsubscribe(self._changed)

    def view(self, upstream: str) -> EngineView | None:
        """`upstream`'s engine process; None when no supervised engine serves it."""
        return None if self.processes is None else self.processes.snapshot().get(upstream)

    def serving(self) -> Callable[[str], bool]:
        """A check, on one snapshot, of whether an upstream's engine (if any) is running."""
        states = self.processes.snapshot() if self.processes is not None else {}
        return lambda upstream: states.get(upstream, {}).get("state", "running") == "running"

    def _changed(self, upstream: str, view: EngineView) -> None:
        """From the supervisor's watcher thread."""
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the gateway is gone
                self.loop.call_soon_threadsafe(self._apply, upstream, view)

    def _apply(self, upstream: str, view: EngineView) -> None:
        self.set_health(upstream, view.get("state") == "running")
