"""Config of `[prices.UPSTREAM]` and `[nodes.NAME]`: what tokens and nodes cost
(gateway/ledger/cost.py).
Same rules as gateway/config/__init__.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Frozen):
    """USD per million tokens. Cached input is priced at its own rate, never also at `input`."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(ge=0)
    # Relative gap between computed cost and the provider's charged cost counted as drift.
    drift_threshold: float = Field(0.05, ge=0)


class Node(_Frozen):
    cost_per_hour: float = Field(ge=0)
    currency: Literal["USD"] = "USD"
    basis: Literal["list", "committed", "fully_loaded"] = "list"
    # Share of the node's hours the owner actually uses (the economics section's utilisation).
    utilisation: float = Field(1.0, gt=0, le=1)
