"""Config of the scheduled eval rounds: `[evals]`, and where the eval lane's credential is found.

Same rules as gateway/config/frozen.py: frozen, unknown keys are errors.
"""

from __future__ import annotations

import os

from pydantic import Field

from gateway.config.frozen import Frozen, Name

# Where `plumbline serve --workers` hands its workers the eval lane's credential it made.
LANE_KEY_VAR = "PLUMBLINE_LANE_KEY"


class EvalSchedule(Frozen):
    """Scheduled eval runs: the gateway evaluates its own targets through itself."""

    # Hours between runs; 0 switches the schedule off.
    every_hours: float = Field(0.0, ge=0)
    suite: str = "smoke"
    targets: list[Name] = Field(default_factory=list)
    seed: int = 0
    # Each round draws its items from a seed derived from `seed` and the round's number (one per
    # `every_hours`), so the same items are not asked every day; all arms of a round share it.
    rotate_seed: bool = True
    # Eval requests in flight at once (the eval lane's budget; production never queues behind).
    concurrency: int = Field(2, ge=1)
    timeout_s: float = Field(1800.0, gt=0)
    runs_dir: str = "var/evals"
    # Of the math items, this many from reasoning-gym's generators (needs reasoning-gym).
    reasoning_gym: int = Field(0, ge=0)
    # Name of the environment variable holding the eval lane's credential: the key a round's
    # requests present (good only on the eval lane, gateway/edge/lane.py). Set it to run
    # `plumbline eval run --config` through a gateway whose /v1 needs a key, or for gateways
    # that must share one. Unset: the gateway makes one at start (and `plumbline serve
    # --workers` one for all its workers) that never leaves its memory.
    lane_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    # The tripwire (evals/tripwire.py) on each target before a round scores it: a target that
    # fails (degenerate answers, or no answers) is not scored that round.
    tripwire: bool = True
    # Wrong tripwire answers that fail a target too (None: only collapse and silence fail it; a
    # small model answers many of them wrongly while healthy).
    tripwire_max_wrong: int | None = Field(None, ge=0)
    # Collapsed (repeating) tripwire answers a target may give and still be scored.
    tripwire_max_degenerate: int = Field(1, ge=0)
    tripwire_max_tokens: int = Field(256, ge=16)

    def lane_key(self) -> str | None:
        """The eval lane's credential from the environment: `lane_key_env`'s value, else the
        one `plumbline serve --workers` made for its workers (`LANE_KEY_VAR`); None when
        neither is there."""
        if self.lane_key_env is not None and os.environ.get(self.lane_key_env):
            return os.environ[self.lane_key_env]
        return os.environ.get(LANE_KEY_VAR) or None
