"""The report's two PNG charts: accuracy by family per arm, and quality against $/M.

Both draw 95% Wilson intervals as error bars. The frontier chart plots only arms whose cost is
known (`evals.cost`); arms of unknown cost are named in a note on the chart itself, never put
at $0. The frontier (`evals.cost.frontier`) is drawn as a step line through its arms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.cost import ArmCost, frontier
from evals.result import ItemResult
from evals.stats import by_family


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def accuracy_chart(arms: Mapping[str, Sequence[ItemResult]], path: Path) -> Path:
    """A bar chart of accuracy by family per arm, with Wilson intervals as error bars."""
    plt = _pyplot()
    summaries = {label: by_family(rs) for label, rs in arms.items()}
    families = sorted({f for s in summaries.values() for f in s if f != "overall"}) + ["overall"]
    width = 0.8 / max(1, len(summaries))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(families) * max(1, len(summaries)) / 2), 4))
    for i, (label, fams) in enumerate(summaries.items()):
        xs, ys, lo, hi = [], [], [], []
        for j, family in enumerate(families):
            if family in fams:
                s = fams[family]
                xs.append(j + i * width)
                ys.append(s.accuracy)
                # Clamp: at 0 or n correct, float rounding can put the bound a hair past it.
                lo.append(max(0.0, s.accuracy - s.ci[0]))
                hi.append(max(0.0, s.ci[1] - s.accuracy))
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label)
    ax.set_xticks([j + width * (len(summaries) - 1) / 2 for j in range(len(families))])
    ax.set_xticklabels(families, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (95% Wilson)")
    # Fixed places, never loc="best": its search over every bar is slow, and matplotlib warns
    # when it takes over a second (a loaded machine turned that warning into a failed report).
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def frontier_chart(costs: Mapping[str, ArmCost], path: Path) -> Path | None:
    """Accuracy against $ per million output tokens, one point per arm of known cost (None when
    no arm has one); arms of unknown cost are named in a note under the axes."""
    known = {label: c for label, c in costs.items() if c.known}
    if not known:
        return None
    unknown = sorted(label for label, c in costs.items() if not c.known)
    on = frontier(costs)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, c in known.items():
        x, q = c.usd_per_m_output, c.quality
        ax.errorbar(
            [x],
            [q.accuracy],
            yerr=[[max(0.0, q.accuracy - q.ci[0])], [max(0.0, q.ci[1] - q.accuracy)]],
            fmt="o",
            capsize=3,
        )
        ax.annotate(label, (x, q.accuracy), textcoords="offset points", xytext=(5, 4))
    line = sorted((known[label] for label in on), key=lambda c: c.usd_per_m_output or 0.0)
    if len(line) > 1:
        ax.step(
            [c.usd_per_m_output for c in line],
            [c.quality.accuracy for c in line],
            where="post",
            linestyle="--",
            color="grey",
            label="frontier",
        )
        ax.legend(fontsize="small", loc="lower right")
    ax.set_xlabel("$ per million output tokens")
    ax.set_ylabel("accuracy (95% Wilson)")
    ax.set_ylim(0, 1)
    ax.set_xlim(left=0)
    if unknown:
        fig.text(
            0.01,
            0.01,
            "cost unknown, not plotted: " + ", ".join(unknown),
            fontsize="small",
            color="firebrick",
        )
    fig.tight_layout(rect=(0, 0.05 if unknown else 0, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
