"""Rounds sized to decide: what a gate round can tell apart, and how big the next one must be.

A gate decision rests on paired comparisons (McNemar on identical items, `evals.stats`). How
small a gap one can see depends on the paired items n and on the discordance ψ — the share of
items the two arms answer differently — and `evals.power` turns them into the minimum detectable
effect (MDE) at the gate's alpha and power. Here that is applied to the gate:

- `arm_resolution`: each arm's comparison against the best, from its own discordant counts.
- `decision_resolution` (gateway/trust/evidence.py, beside the arms it reads): the round's,
  from its least-resolved comparison (fewest paired items, most discordance, the control
  pair's included): "this round can tell apart a 6-point gap".
- `planned_items`: how many paired items the next round needs to tell apart `detect_gap`, from
  the discordance the last decision observed (the configured `discordance` before any), capped
  at `max_round_items`; a route with `round_items` set asks that many and its decisions say
  what that can and cannot tell apart.
- `targets_resolution`: the same sentence for a scheduled run of plain targets (no gate), so
  a small round says what it cannot tell apart.
- `round_seed`: the item seed of the round that starts at `now`: the configured seed and the
  round's number (one per `every_hours` since the epoch), hashed, so each round asks new items
  while every arm of a round — the control's two runs included — gets the same ones.

The statistics (`evals.power`, scipy) load only when a round is sized or decided.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

# evals is the optional [evals] extra: its imports stay inside the functions that need them,
# so the gateway starts without it (tests/gateway/test_without_evals.py).
if TYPE_CHECKING:
    from evals.power import Resolution
    from evals.result import ItemResult
    from gateway.config.trust import GateConfig


def arm_resolution(paired_n: int, discordant: int, alpha: float, power: float) -> Resolution:
    from evals.power import Resolution

    rate = discordant / paired_n if paired_n else 0.0
    return Resolution.of(paired_n, rate, alpha, power)


def gap_phrase(gap: float) -> str:
    """0.05 -> "a 5-point gap" (`evals.power.gap_phrase`, loaded on use)."""
    from evals.power import gap_phrase as phrase

    return phrase(gap)


def needed_sentence(detect_gap: float, needed: int, n: int | None) -> str:
    """ "a 5-point gap needs 498 paired items" (and, when fewer were asked, how many were)."""
    text = f"{gap_phrase(detect_gap)} needs {needed} paired items"
    if n is not None and n < needed:
        text += f", this round had {n}"
    return text


def planned_items(cfg: GateConfig, observed: float | None) -> int:
    """Paired items the next round asks: `round_items` when set, else what tells `detect_gap`
    apart at the observed discordance (the planning `discordance` before any is observed),
    never more than `max_round_items`."""
    from evals.power import items_needed

    if cfg.round_items is not None:
        return cfg.round_items
    rate = cfg.discordance if observed is None else observed
    # A round that saw (almost) no discordance still plans for the gap it must detect.
    needed = items_needed(max(rate, cfg.detect_gap), cfg.detect_gap, cfg.alpha, cfg.power)
    return min(needed, cfg.max_round_items)


def family_sizes(
    base: dict[str, int | None], route_items: int, shape_items: dict[str, int]
) -> dict[str, int]:
    """Items per family for a gate round: the suite's families (`base`, None meaning the
    family's default size) grown evenly until the route's decision has `route_items` paired
    items, and each shape's family to its own `shape_items`."""
    from evals import families

    sizes = {f: families.default_size(f) if n is None else n for f, n in base.items()}
    sizes = {f: n for f, n in sizes.items() if n}
    if sizes and sum(sizes.values()) < route_items:
        each = -(-route_items // len(sizes))
        sizes = {f: max(n, each) for f, n in sizes.items()}
    for family, n in shape_items.items():
        sizes[family] = max(sizes.get(family, 0), n)
    return sizes


def targets_resolution(results: Sequence[ItemResult], discordance: float = 0.15) -> str:
    """What a scheduled run of plain targets can tell apart: its first two targets paired, at
    the discordance they showed (or `discordance` when they cannot be paired)."""
    from evals.power import Resolution
    from evals.stats import PairingError, pair

    by_target: dict[str, list[ItemResult]] = {}
    for r in results:
        by_target.setdefault(r.target, []).append(r)
    if not by_target:
        return "no results"
    arms = list(by_target.values())
    n, rate = len(arms[0]), discordance
    if len(arms) > 1:
        try:
            p = pair(arms[0], arms[1])
            n, rate = p.n, (p.discordant / p.n if p.n else 0.0)
        except PairingError:
            pass
    return Resolution.of(n, rate).sentence()


def round_seed(seed: int, now: float, every_hours: float) -> int:
    """The items' seed for the round at `now`: new each round, the same for all its arms."""
    number = int(now // (every_hours * 3600)) if every_hours > 0 else 0
    digest = hashlib.sha256(f"plumbline-round:{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")
