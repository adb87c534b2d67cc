"""The report's per-item breakdowns: sub-scores over every item of a family, errors and timeouts
by class, quality against cost per arm, and the details of every item not scored correct.

Pure functions of `ItemResult`s (grouped into arms by `evals.report`) returning `Section`s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from evals.cost import ArmCost, frontier
from evals.families import parts_of
from evals.result import ItemResult
from evals.section import Section
from evals.stats import wilson

DETAIL_SHOWN = 300  # characters of an item's detail shown in the details table


def not_shown(results: Sequence[ItemResult], key: str) -> str:
    """How many items could not show sub-score `key`, by outcome ("truncated 8, timeout 1")."""
    counts = Counter(r.outcome for r in results if key not in r.parts)
    return ", ".join(f"{o} {n}" for o, n in sorted(counts.items())) or "none"


def parts_section(arms: dict[str, list[ItemResult]]) -> Section | None:
    """Each sub-score over *every* item of its family: an item that could not show it
    (truncated, timed out, errored, unparsed...) counts as failing it, and is counted by outcome
    beside the score."""
    rows = []
    for label, rs in arms.items():
        by_fam: dict[str, list[ItemResult]] = defaultdict(list)
        for r in rs:
            by_fam[r.family].append(r)
        for family, frs in sorted(by_fam.items()):
            seen = {k for r in frs for k in r.parts}
            keys = [*parts_of(family), *sorted(seen - set(parts_of(family)))]
            for key in keys:
                k, n = sum(bool(r.parts.get(key, False)) for r in frs), len(frs)
                lo, hi = wilson(k, n)
                rows.append(
                    (
                        family,
                        label,
                        key,
                        f"{k / n:.3f} [{lo:.3f}, {hi:.3f}]",
                        f"{k}/{n}",
                        not_shown(frs, key),
                    )
                )
    if not rows:
        return None
    return Section(
        "Sub-scores",
        ("family", "arm", "sub-score", "rate [95% Wilson]", "k/n", "failed without a score"),
        tuple(rows),
        (
            "Every item of the family is in each denominator; an item that could not show a "
            "sub-score (truncated, timed out, errored, unparsed) counts as failing it and is "
            "counted in the last column.",
        ),
    )


def errors_section(arms: dict[str, list[ItemResult]]) -> Section:
    """Items with no answer to score, per arm: errors (by class) and timeouts, apart."""
    rows = []
    for label, rs in arms.items():
        errors = [r for r in rs if r.outcome == "error"]
        timeouts = [r for r in rs if r.outcome == "timeout"]
        classes = Counter(r.error_class or "unknown" for r in errors)
        rows.append(
            (
                label,
                str(len(rs)),
                str(len(errors)),
                ", ".join(f"{c} {n}" for c, n in sorted(classes.items())) or "-",
                str(len(timeouts)),
                str(sum(r.outcome == "truncated" for r in rs)),
            )
        )
    notes = (
        "Errors are failures to get an answer (after retries) and are excluded from pairing; "
        "timeouts are the model's and count as wrong. Both stay in every denominator.",
    )
    return Section(
        "Errors and timeouts",
        ("arm", "items", "errors", "by class", "timeouts", "truncated"),
        tuple(rows),
        notes,
    )


def details(arms: dict[str, list[ItemResult]]) -> Section:
    rows = [
        (
            label,
            r.item_id,
            r.family,
            r.outcome,
            r.finish_reason or "",
            r.error_class or "",
            (r.error or r.detail or "")[:DETAIL_SHOWN],
        )
        for label, rs in arms.items()
        for r in rs
        if not r.correct
    ]
    return Section(
        "Item details",
        ("arm", "item", "family", "outcome", "finish reason", "error class", "detail / error"),
        tuple(rows),
        () if rows else ("every item was scored correct",),
    )


COST_TITLE = "Quality against cost"


def cost_section(costs: dict[str, ArmCost]) -> Section:
    on = frontier(costs)
    rows, unknown = [], []
    for label, c in costs.items():
        q = c.quality
        quality = f"{q.accuracy:.3f} [{q.ci[0]:.3f}, {q.ci[1]:.3f}]"
        if not c.known:
            unknown.append(label)
            rows.append((label, quality, "unknown", "unknown", f"0/{c.items}", "-", "-"))
            continue
        rows.append(
            (
                label,
                quality,
                f"{c.usd:.4g}",
                f"{c.usd_per_m_output:.3f}",
                f"{c.priced}/{c.items}",
                ", ".join(c.bases),
                "yes" if label in on else "no",
            )
        )
    notes = [
        "$/M is the arm's cost over the output tokens of its priced items; accuracy is over "
        "every item. Cost basis: price = the gateway's price table per request; node-hours = "
        "the self-hosted node's [nodes.NAME] cost per active hour times the hours this run kept "
        "it busy, shared by tokens."
    ]
    if unknown:
        notes.append(
            f"cost unknown for {', '.join(unknown)}: left off the frontier chart (never plotted "
            "at $0). A self-hosted arm is priced from the gateway config's [nodes.NAME] "
            "(eval report --config)."
        )
    partial = [label for label, c in costs.items() if c.known and c.priced < c.items]
    if partial:
        notes.append(
            f"partly priced: {', '.join(partial)} (items without a cost are left out of $/M)"
        )
    return Section(
        COST_TITLE,
        (
            "arm",
            "accuracy [95% Wilson]",
            "total cost ($)",
            "$ per M output tokens",
            "items with cost",
            "cost basis",
            "on frontier",
        ),
        tuple(rows),
        tuple(notes),
    )
