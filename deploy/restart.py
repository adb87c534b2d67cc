"""What the supervisor does when an engine that was serving exits: the restart policy and the
state it reports.

An engine can die long after it became healthy (an illegal instruction on its first long
prompt, the OOM killer, a CUDA fault). The supervisor then marks it ``restarting``, waits a
backoff (`RestartPolicy.delay`: base, doubled per consecutive failure, capped) and starts it
again. A start that fails counts as another failure; after `RestartPolicy.max_restarts`
consecutive failures it is ``down`` and stays down. A life of `RestartPolicy.stable_s` or more
ends the streak, so an engine that crashes once a day is restarted every time.

Pure: nothing here starts or waits (`deploy.supervisor` does, with an injected clock and sleep).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any, Literal

State = Literal["starting", "running", "restarting", "down", "stopped"]


@dataclass(frozen=True)
class RestartPolicy:
    """How often and how soon a dead engine is started again."""

    max_restarts: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0
    stable_s: float = 300.0

    def delay(self, failures: int) -> float:
        """The wait before the restart that follows the `failures`-th consecutive failure."""
        return min(self.cap_s, self.base_s * 2 ** max(0, failures - 1))

    def gives_up(self, failures: int) -> bool:
        """Whether `failures` consecutive failures leave the engine down."""
        return failures > self.max_restarts

    def streak(self, failures: int, lived_s: float) -> int:
        """The consecutive failures counting a death after `lived_s` seconds of serving."""
        return 1 if lived_s >= self.stable_s else failures + 1


def exit_label(code: int | None) -> int | str | None:
    """An exit status as people read it: the code, or the signal's name (``SIGILL``)."""
    if code is None or code >= 0:
        return code
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass
class EngineState:
    """One engine as the supervisor sees it (what the gateway's ``/health`` shows)."""

    state: State = "starting"
    restarts: int = 0
    last_exit: int | str | None = None
    failures: int = 0  # consecutive, for the policy

    def view(self) -> dict[str, Any]:
        return {"state": self.state, "restarts": self.restarts, "last_exit": self.last_exit}


DEFAULT_POLICY = RestartPolicy()
