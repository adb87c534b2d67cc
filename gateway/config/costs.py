"""Config of `[prices.UPSTREAM]` and `[nodes.NAME]`: what tokens and nodes cost
(gateway/ledger/cost.py).
Same rules as gateway/config/frozen.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.frozen import Frozen


class Price(Frozen):
    """USD per million tokens. Cached input is priced at its own rate, never also at `input`."""

    # USD per million prompt tokens not served from the provider's cache.
    input: float = Field(ge=0)
    # USD per million prompt tokens served from the cache (unset: priced as `input`).
    cached_input: float | None = Field(None, ge=0)
    # USD per million completion tokens (reasoning tokens included).
    output: float = Field(ge=0)
    # Relative gap between computed cost and the provider's charged cost counted as drift.
    drift_threshold: float = Field(0.05, ge=0)


class Node(Frozen):
    """A machine that runs local replicas, and what an hour of it costs."""

    # What an hour of the node costs, in `currency`.
    cost_per_hour: float = Field(ge=0)
    # Only USD for now.
    currency: Literal["USD"] = "USD"
    # What the hourly figure covers: a list price, a committed-use rate, or fully loaded
    # (power, space, people); shown beside every $/M derived from it.
    basis: Literal["list", "committed", "fully_loaded"] = "list"
    # Share of the node's hours the owner actually uses (the economics section's utilisation).
    utilisation: float = Field(1.0, gt=0, le=1)
