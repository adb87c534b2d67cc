"""Live state of every upstream: requests in flight, health, failures and cooldown.

Dispatch reports each attempt's outcome here; a background prober checks health; routing reads a
snapshot (`views`). One `Pool` per app, owned by the app state — no module globals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.config import Config
from gateway.serving.routing import UpstreamView


@dataclass(slots=True)
class UpstreamState:
    name: str
    weight: float
    inflight: int = 0
    healthy: bool = True
    failures: int = 0
    cooling_until: float = 0.0
    truncations: int = 0
    reasoning_leaks: int = 0
    demoted: bool = False  # set by the watchdog (Watchdog.on_demote)


class Pool:
    def __init__(self, config: Config, on_inflight: Callable[[str, int], None] | None = None):
        s = config.server
        self._on_inflight = on_inflight
        self.cooldown_after = s.cooldown_after
        self.cooldown_s = s.cooldown_s
        self.max_inflight = s.max_inflight_per_upstream
        self.states = {u.name: UpstreamState(u.name, u.weight) for u in config.upstreams}

    def views(self, names: Iterable[str] | None = None) -> dict[str, UpstreamView]:
        """A snapshot for routing: of `names` (one route's upstreams), else of every upstream."""
        states = self.states
        chosen = states if names is None else [n for n in names if n in states]
        return {
            n: UpstreamView(
                name=n,
                inflight=states[n].inflight,
                healthy=states[n].healthy,
                cooling_until=states[n].cooling_until,
                weight=states[n].weight,
                max_inflight=self.max_inflight,
                demoted=states[n].demoted,
            )
            for n in chosen
        }

    def begin(self, name: str) -> None:
        self.states[name].inflight += 1
        if self._on_inflight is not None:
            self._on_inflight(name, 1)

    def end(self, name: str) -> None:
        self.states[name].inflight -= 1
        if self._on_inflight is not None:
            self._on_inflight(name, -1)

    def succeeded(self, name: str) -> None:
        st = self.states[name]
        st.failures = 0
        st.healthy = True
        st.cooling_until = 0.0

    def failed(self, name: str, now: float | None = None) -> None:
        st = self.states[name]
        st.failures += 1
        if st.failures >= self.cooldown_after:
            st.cooling_until = (now if now is not None else time.monotonic()) + self.cooldown_s

    def set_demoted(self, name: str, demoted: bool) -> None:
        if name in self.states:
            self.states[name].demoted = demoted

    def set_health(self, name: str, ok: bool) -> None:
        st = self.states[name]
        if ok and not st.healthy:
            st.failures = 0
            st.cooling_until = 0.0
        st.healthy = ok
