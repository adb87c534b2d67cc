"""The GPUs a launch is given, and the power-limit check made before trusting a host.

Cards run below their maximum board power lose a quarter to a third of their throughput (Sqwish
Labs' published "Blackwell inference benchmarks", September 2026, found 400 W cards 23% slower
than 600 W ones on NVFP4 and 34% on FP8), and nothing in vLLM's output says so.
`check_power_limits` reads ``power.limit`` and ``power.max_limit`` from ``nvidia-smi`` and
refuses a host whose cards are capped, unless told the cap is intended.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

POWER_QUERY = (
    "--query-gpu=index,power.limit,power.max_limit",
    "--format=csv,noheader,nounits",
)
TOLERANCE_W = (
    0.5  # nvidia-smi prints two decimals; a limit within this of the maximum is full power
)


class GpuError(RuntimeError):
    """nvidia-smi could not be run or answered something unreadable, or a GPU list is invalid."""


class PowerCappedError(GpuError):
    """One or more GPUs have a power limit below their maximum."""

    def __init__(self, capped: Sequence[GpuPower]) -> None:
        self.capped = tuple(capped)
        listed = "; ".join(
            f"GPU {g.index}: {g.limit_w:g} W of {g.max_limit_w:g} W max" for g in self.capped
        )
        super().__init__(
            f"power-capped GPUs ({listed}). Raise the limit (nvidia-smi -i N -pl MAX), or pass "
            "--allow-power-capped (allow_power_capped=True from Python) to run on a capped host "
            "knowingly."
        )


@dataclass(frozen=True)
class GpuPower:
    """One GPU's power limit and the maximum it could be set to (watts; None when N/A)."""

    index: int
    limit_w: float | None
    max_limit_w: float | None

    @property
    def capped(self) -> bool:
        """True when both values are known and the limit is below the maximum."""
        if self.limit_w is None or self.max_limit_w is None:
            return False
        return self.limit_w < self.max_limit_w - TOLERANCE_W


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` → ``(0, 1, 2, 3)``; rejects empty, negative, non-integer or repeated ids."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part.isdigit() for part in parts):
        raise GpuError(f"GPU list {text!r} must be comma-separated non-negative integers")
    ids = tuple(int(part) for part in parts)
    if len(set(ids)) != len(ids):
        raise GpuError(f"GPU list {text!r} names a GPU twice")
    return ids


def _watts(field: str) -> float | None:
    field = field.strip()
    if field.startswith("[") or field.upper() in ("N/A", ""):  # "[N/A]", "[Not Supported]"
        return None
    return float(field)


def parse_power_csv(text: str) -> list[GpuPower]:
    """Parse ``index, power.limit, power.max_limit`` lines (csv, noheader, nounits)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) != 3:
            raise GpuError(f"unexpected nvidia-smi line {line!r}")
        try:
            gpus.append(GpuPower(int(fields[0]), _watts(fields[1]), _watts(fields[2])))
        except ValueError as exc:
            raise GpuError(f"unexpected nvidia-smi line {line!r}") from exc
    return gpus


def query_power(nvidia_smi: str = "nvidia-smi", timeout_s: float = 30.0) -> list[GpuPower]:
    """Run `nvidia-smi` and return every GPU's power limits."""
    try:
        done = subprocess.run(
            [nvidia_smi, *POWER_QUERY], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuError(f"could not run {nvidia_smi}: {exc}") from exc
    if done.returncode != 0:
        raise GpuError(f"{nvidia_smi} exited {done.returncode}: {done.stderr.strip()}")
    return parse_power_csv(done.stdout)


def check_power_limits(
    gpus: Sequence[int] | None = None,
    allow_power_capped: bool = False,
    nvidia_smi: str = "nvidia-smi",
) -> list[GpuPower]:
    """The power limits of `gpus` (all when None); raises PowerCappedError if any is capped.

    With `allow_power_capped` the capped GPUs are returned rather than refused, so the caller
    can record them next to its numbers. A requested GPU that nvidia-smi does not list is an
    error.
    """
    found = query_power(nvidia_smi)
    if gpus is not None:
        by_index = {g.index: g for g in found}
        missing = [i for i in gpus if i not in by_index]
        if missing:
            raise GpuError(f"GPUs {missing} not found; nvidia-smi lists {sorted(by_index)}")
        found = [by_index[i] for i in gpus]
    capped = [g for g in found if g.capped]
    if capped and not allow_power_capped:
        raise PowerCappedError(capped)
    return found
