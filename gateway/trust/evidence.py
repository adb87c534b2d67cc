"""The gate's evidence, arm by arm: what `gateway.trust.gate.decide` weighs and keeps.

`ArmEvidence` is one upstream's score, interval, paired test against the best and verdict;
`refuse_incomparable` takes out the arms that cannot be compared with the control (not at parity,
named field by field by `evals.parity`, or on other items) and `against_best` judges the rest
against the noise floor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.trust.sizing import arm_resolution, gap_phrase

# evals is the optional [evals] extra: its imports stay inside the functions that need them,
# so the gateway starts without it (tests/gateway/test_without_evals.py).
if TYPE_CHECKING:
    from evals.power import Resolution
    from evals.result import ItemResult
    from evals.stats import NoiseFloor, Paired, Summary


@dataclass(frozen=True, slots=True)
class ArmEvidence:
    upstream: str
    n: int
    correct: int
    accuracy: float
    ci: tuple[float, float]
    price_per_m: float | None
    # Against the best scorer, on the items both scored (None for the best itself).
    paired_n: int | None = None
    only_best: int | None = None  # items only the best got right
    only_this: int | None = None
    p_value: float | None = None
    eligible: bool = False
    why: str = ""
    # Differences of meaning the route accepts that this arm's numbers carry (`accept_unequal`:
    # "api-b cannot be sent top_k=20 (kind openai)"), shown beside them; "" when none.
    accepted: str = ""
    # The smallest gap this comparison detects (alpha, power of the decision); None: none.
    mde: float | None = None


def floor_dict(floor: NoiseFloor | None) -> dict[str, Any]:
    if floor is None:
        return {}
    return {
        "gap": floor.gap,
        "imbalance_rate": floor.imbalance_rate,
        "discordance_rate": floor.discordance_rate,
        "controls": [
            {"n": c.n, "only_a": c.only_a, "only_b": c.only_b, "p_value": c.p_value}
            for c in floor.controls
        ],
    }


def noise_floor(control: Sequence[Paired] | NoiseFloor | None) -> NoiseFloor | None:
    """The floor the control pairs set (None without usable ones)."""
    from evals.stats import NoiseFloor

    if isinstance(control, NoiseFloor) or control is None:
        return control
    try:
        return NoiseFloor.from_controls(control)
    except ValueError:
        return None


def refuse_incomparable(
    results: Mapping[str, Sequence[ItemResult]],
    summaries: dict[str, Summary],
    floor: NoiseFloor | None,
    prices: Mapping[str, float | None],
) -> list[ArmEvidence]:
    """Arms not at parity with the control (asked otherwise: a field their upstream could not be
    told, thinking off against on), or on other items, are refused before anything else: they
    can be neither the best nor the cheapest. Removed from `summaries`; their evidence returned,
    the refusal naming field, value and upstream."""
    from evals.parity import accepted_text, why_unequal

    reference = floor.controls[0].params_hash if floor is not None and floor.controls else None
    control = next(
        (u for u in summaries if {r.params_hash for r in results[u]} == {reference}), None
    )
    every_item = set().union(*({r.item_digest for r in results[u]} for u in summaries))
    refused: list[ArmEvidence] = []
    for up in list(summaries):
        # The answered items' hash (as `evals.stats` pairs them): none answered reads "".
        hashes = {r.params_hash for r in results[up] if r.params_hash} or {""}
        why = None
        if reference is not None and hashes != {reference}:
            label = control or "the control"
            them = results[control] if control is not None else ()
            why = f"refused, not at parity with {label}: " + why_unequal(
                up, results[up], label, them
            )
        elif {r.item_digest for r in results[up]} != every_item:
            why = "refused: item sets differ (only identical items pair)"
        if why is not None:
            s = summaries.pop(up)
            refused.append(
                ArmEvidence(
                    up,
                    s.n,
                    s.correct,
                    s.accuracy,
                    s.ci,
                    prices.get(up),
                    why=why,
                    accepted=accepted_text(results[up]),
                )
            )
    return refused


def against_best(
    best_rs: Sequence[ItemResult],
    rs: Sequence[ItemResult],
    best: str,
    up: str,
    floor: NoiseFloor | None,
    alpha: float,
    min_items: int,
    sizing: tuple[float, float] = (0.05, 0.8),
) -> dict[str, Any]:
    """The arm against the best scorer: paired test, noise floor, and whether its round could
    have told `sizing`'s gap apart (detect_gap, power): too small a round is not parity."""
    from evals.stats import PairingError, against_floor, pair

    try:
        p = pair(best_rs, rs, best, up)
    except PairingError as e:
        return {"why": f"refused: {e}"}
    detect_gap, power = sizing
    res = arm_resolution(p.n, p.discordant, alpha, power)
    evidence = {
        "paired_n": p.n,
        "only_best": p.only_a,
        "only_this": p.only_b,
        "p_value": p.p_value,
        "mde": res.mde,
    }
    if floor is None:
        return {**evidence, "why": "no noise floor: a control pair is needed"}
    if p.n < min_items:
        return {**evidence, "why": f"only {p.n} paired items (< {min_items})"}
    verdict = against_floor(p, floor, alpha)
    if p.gap < 0 and verdict.exceeds:
        return {**evidence, "why": f"worse beyond the floor: {verdict.reason}"}
    if res.mde is None or res.mde > detect_gap:
        return {
            **evidence,
            "why": f"cannot decide: {res.sentence()}; the gate asks for {gap_phrase(detect_gap)}",
        }
    return {**evidence, "eligible": True, "why": f"within the floor: {verdict.reason}"}


def decision_resolution(
    arms: Sequence[ArmEvidence], floor: dict[str, Any], alpha: float, power: float
) -> Resolution | None:
    """What the round as a whole can tell apart: the fewest paired items of any comparison it
    made, at the most discordance any comparison or control pair showed. None when the round
    made no paired comparison (one arm, or every other refused)."""
    from evals.power import Resolution

    compared = [a for a in arms if a.paired_n]
    if not compared:
        return None
    n = min(a.paired_n or 0 for a in compared)
    rates = [((a.only_best or 0) + (a.only_this or 0)) / (a.paired_n or 1) for a in compared]
    rates.append(float(floor.get("discordance_rate") or 0.0))
    return Resolution.of(n, max(rates), alpha, power)
