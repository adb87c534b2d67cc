"""The run report: family table with intervals, sub-scores, errors and timeouts, paired results
against the noise floor, quality against cost, and per-item details — as Markdown (report.md,
details.md), HTML (report.html, details inline) and PNGs: accuracy by family per arm
(accuracy.png) and quality against $/M with the frontier (frontier.png, when any arm's cost is
known; see `evals.cost`). Sub-scores count every item of their family (an item that could not
show one fails it); an arm of unknown cost is said to be unknown and left off the chart.

Input is `ItemResult`s from one or more runs. An *arm* is one (run, target); its label is the
target name, or `target@run` when the same target appears in more than one run. By default
the first arm is the baseline every other arm is paired against, and every two arms with the
same target and the same sampling-parameter hash are taken as same-configuration-twice
controls that fix the noise floor. A pairing the statistics refuse (arms not at parity: asked
otherwise, or an upstream that could not be told part of the request, named field by field by
`evals.parity`) is reported as refused, with the reason, rather than computed. What each arm's
upstream could not be told, and what of it its route accepts (`accept_unequal`), is shown in the
Arms table and beside the arm's numbers in the family table. So is a control
whose two runs were served by different engines (vLLM version or chat template, as the gateway
fingerprinted them): an upgrade between the runs is not noise, and a floor measured across one
would hide real differences. An arm served by more than one engine is named in the Arms notes.

The report is built once as a list of `Section`s (title, table, notes) and rendered twice, so
the Markdown and the HTML cannot disagree.
"""

from __future__ import annotations

import hashlib
import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evals.breakdown import COST_TITLE, cost_section, errors_section, parts_section
from evals.breakdown import details as details_section
from evals.chart import accuracy_chart, frontier_chart
from evals.cost import ArmCost, arm_costs, node_map, price_nodes
from evals.families import headline_of
from evals.parity import accepted, accepted_text, unsent
from evals.power import ALPHA, POWER, Resolution, points
from evals.result import ItemResult, engines
from evals.section import HTML_PAGE, Section, html_section, markdown_section
from evals.stats import (
    NoiseFloor,
    Paired,
    PairingError,
    against_floor,
    by_family,
    pair,
)
from evals.tripwire import section as tripwire_section

if TYPE_CHECKING:
    from gateway.config import Config

RATE_COLUMNS = ("truncated", "unparsed", "degenerate", "timeout", "malformed", "error")


@dataclass(frozen=True, slots=True)
class Report:
    sections: tuple[Section, ...]
    arms: dict[str, list[ItemResult]] = field(default_factory=dict)
    # Every item not scored correct, with its scorer's detail or its error (`evals.breakdown`).
    details: Section = Section("Item details")
    costs: dict[str, ArmCost] = field(default_factory=dict)

    def markdown(
        self, chart: str | None = None, frontier: str | None = None, details: str | None = None
    ) -> str:
        """The report as Markdown; `chart`, `frontier`: image names; `details`: the name of the
        Markdown file holding `self.details` (written beside it by `write_report`)."""
        out = ["# Plumbline eval report", ""]
        if chart:
            out += [f"![accuracy by family]({chart})", ""]
        for s in self.sections:
            out += markdown_section(s)
            if s.title == COST_TITLE and frontier:
                out += [f"![quality against cost]({frontier})", ""]
        if details:
            out += [f"Per-item details of every item not scored correct: [{details}]({details})"]
        return "\n".join(out).rstrip() + "\n"

    def details_markdown(self) -> str:
        return "\n".join(["# Plumbline eval: item details", "", *markdown_section(self.details)])

    def html(self, chart: str | None = None, frontier: str | None = None) -> str:
        body = ["<h1>Plumbline eval report</h1>"]
        if chart:
            body.append(f'<img src="{html.escape(chart)}" alt="accuracy by family">')
        for s in self.sections:
            body += html_section(s)
            if s.title == COST_TITLE and frontier:
                body.append(f'<img src="{html.escape(frontier)}" alt="quality against cost">')
        body += html_section(self.details)
        return HTML_PAGE.format(body="\n".join(body))


def arms_from_results(results: Sequence[ItemResult]) -> dict[str, list[ItemResult]]:
    """Group results into arms by (run, target), labelled as the module docstring says."""
    groups: dict[tuple[str, str], list[ItemResult]] = defaultdict(list)
    for r in results:
        groups[(r.run, r.target)].append(r)
    runs_per_target: dict[str, int] = defaultdict(int)
    for _, target in groups:
        runs_per_target[target] += 1
    return {
        (target if runs_per_target[target] == 1 else f"{target}@{run}"): rs
        for (run, target), rs in groups.items()
    }


def default_controls(arms: dict[str, list[ItemResult]]) -> list[tuple[str, str]]:
    """Pairs of arms with the same target and sampling-parameter hash (served twice)."""
    keys = {label: (rs[0].target, rs[0].params_hash) for label, rs in arms.items() if rs}
    labels = list(keys)
    return [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if keys[a] == keys[b]]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _item_set(results: Sequence[ItemResult]) -> str:
    h = hashlib.sha256()
    for digest in sorted({r.item_digest for r in results}):
        h.update(digest.encode())
    return h.hexdigest()[:12]


def _engine_text(results: Sequence[ItemResult]) -> str:
    return ", ".join(sorted(engines(results))) or "unknown"


def _arms_section(arms: dict[str, list[ItemResult]]) -> Section:
    rows, notes = [], []
    for label, rs in arms.items():
        hashes = sorted({r.params_hash for r in rs})
        rows.append(
            (
                label,
                rs[0].target,
                rs[0].run,
                str(len(rs)),
                _item_set(rs),
                ", ".join(h[:12] for h in hashes),
                _engine_text(rs),
                _parity_text(rs),
            )
        )
        if len(engines(rs)) > 1:
            notes.append(
                f"{label} was served by {len(engines(rs))} engines ({_engine_text(rs)}): its "
                "items do not come from one serving stack"
            )
    return Section(
        "Arms",
        ("arm", "target", "run", "items", "item set", "params hash", "engine", "parity"),
        tuple(rows),
        tuple(notes),
    )


def _parity_text(results: Sequence[ItemResult]) -> str:
    """What the arm's upstream could not be told, and what of it its route accepts."""
    parts = [f"not at parity: {t}" for t in unsent(results)]
    parts += [f"accepted unequal: {t}" for t in accepted(results)]
    return "; ".join(parts) or "at parity"


def _family_section(arms: dict[str, list[ItemResult]]) -> Section:
    rows = []
    for label, rs in arms.items():
        for family, s in by_family(rs).items():
            tokens = "" if s.mean_output_tokens is None else f"{s.mean_output_tokens:.0f}"
            rows.append(
                (
                    family,
                    label,
                    str(s.n),
                    f"{s.accuracy:.3f} [{s.ci[0]:.3f}, {s.ci[1]:.3f}]",
                    *(_pct(s.rates[c]) for c in RATE_COLUMNS),
                    _pct(s.length_stop_rate),
                    _pct(s.reasoning_leak_rate),
                    tokens,
                )
            )
    headers = (
        "family",
        "arm",
        "n",
        "accuracy [95% Wilson]",
        *RATE_COLUMNS,
        "length stops",
        "reasoning leaks",
        "mean out tokens",
    )
    notes = (
        "Accuracy counts every item in the denominator; only `correct` is right.",
        *_headline_notes({r.family for rs in arms.values() for r in rs}),
    )
    return Section("Accuracy by family", headers, tuple(rows), notes)


def _headline_notes(families: set[str]) -> list[str]:
    """Where a benchmark's own reference decides a family's accuracy, say whose verdict it is."""
    return [f"{f}: {headline_of(f)}" for f in sorted(families) if headline_of(f)]


def _pair_row(p: Paired) -> tuple[str, ...]:
    return (
        f"{p.a} vs {p.b}",
        str(p.n),
        f"{p.a_accuracy:.3f}",
        f"{p.b_accuracy:.3f}",
        f"{p.gap:+.3f}",
        f"{p.only_a} / {p.only_b}",
        f"{p.p_value:.3g}",
        f"{p.mid_p:.3g}",
        f"{p.only_in_a} / {p.only_in_b} / {p.errored}",
        str(p.one_side_truncated),
    )


PAIR_HEADERS = (
    "pair",
    "common items",
    "acc A",
    "acc B",
    "gap (B-A)",
    "only A / only B right",
    "McNemar p",
    "mid-p",
    "excluded: only A / only B / error",
    "one side truncated",
)


def _try_pair(arms: dict[str, list[ItemResult]], a: str, b: str) -> Paired | str:
    try:
        return pair(arms[a], arms[b], a, b)
    except PairingError as exc:
        return str(exc)


def _floor_section(
    arms: dict[str, list[ItemResult]], control_pairs: Sequence[tuple[str, str]]
) -> tuple[Section, NoiseFloor | None]:
    """The noise floor the control pairs set (each the same configuration twice), and its
    section; a pair served by different engines is refused."""
    floor_rows, floor_notes, computed = [], [], []
    for a, b in control_pairs:
        if engines(arms[a]) != engines(arms[b]):
            floor_notes.append(
                f"control {a} vs {b} refused: served by different engines "
                f"({_engine_text(arms[a])} / {_engine_text(arms[b])}); a changed serving stack "
                "is not noise"
            )
            continue
        got = _try_pair(arms, a, b)
        if isinstance(got, str):
            floor_notes.append(f"control {a} vs {b} refused: {got}")
        else:
            computed.append(got)
            floor_rows.append(_pair_row(got))
    floor = NoiseFloor.from_controls(computed) if any(c.n for c in computed) else None
    if floor:
        floor_notes.append(
            f"noise floor: aggregate gap {floor.gap:.3f}, discordance "
            f"{_pct(floor.discordance_rate)}, imbalance {_pct(floor.imbalance_rate)} of items"
        )
    else:
        floor_notes.append(
            "no same-configuration-twice control: the noise floor is unknown, so no difference "
            "below can be called real beyond its McNemar p-value"
        )
    section = Section(
        "Noise floor (same configuration twice)",
        PAIR_HEADERS,
        tuple(floor_rows),
        tuple(floor_notes),
    )
    return section, floor


def _paired_section(
    arms: dict[str, list[ItemResult]],
    base: str,
    control_pairs: Sequence[tuple[str, str]],
    floor: NoiseFloor | None,
) -> Section:
    """Every other arm paired against the baseline (controls aside), judged against the floor."""
    control_set = {frozenset(c) for c in control_pairs}
    pair_rows, pair_notes = [], []
    for other in arms:
        if other == base or frozenset((base, other)) in control_set:
            continue
        got = _try_pair(arms, base, other)
        if isinstance(got, str):
            pair_notes.append(f"{base} vs {other} refused: {got}")
            continue
        if floor:
            verdict = against_floor(got, floor)
            said = f"{'exceeds' if verdict.exceeds else 'within'}: {verdict.reason}"
        else:
            said = "floor unknown"
        shown = "; ".join(t for t in (accepted_text(arms[base]), accepted_text(arms[other])) if t)
        pair_rows.append(
            (*_pair_row(got), _can_tell_apart(got), f"{said} ({shown})" if shown else said)
        )
    if pair_rows:
        pair_notes.append(
            f"can tell apart: the smallest accuracy gap the pair detects with power {POWER:g} at "
            f"alpha {ALPHA:g}, given its items and discordance (docs/rounds.md)."
        )
    return Section(
        f"Paired against {base}",
        (*PAIR_HEADERS, "can tell apart", "vs noise floor"),
        tuple(pair_rows),
        tuple(pair_notes),
    )


def _can_tell_apart(p: Paired) -> str:
    """The pair's minimum detectable effect, in points ("5.8-point gap", or "no gap")."""
    res = Resolution.of(p.n, p.discordant / p.n if p.n else 0.0)
    return "no gap" if res.mde is None else f"{points(res.mde)} gap"


def _with_accepted(section: Section, arms: dict[str, list[ItemResult]]) -> Section:
    """`section` with a note per arm whose numbers carry a difference its route accepts."""
    notes = [f"{label}: {text}" for label, rs in arms.items() if (text := accepted_text(rs))]
    return replace(section, notes=(*section.notes, *notes)) if notes else section


def build_report(
    results: Sequence[ItemResult],
    *,
    baseline: str | None = None,
    controls: Sequence[tuple[str, str]] | None = None,
    tripwire: Mapping[str, Mapping[str, Any]] | None = None,
) -> Report:
    """Compute every section of the report from per-item results (pure); `tripwire`: each
    target's tripwire verdict before it was scored (`evals.tripwire.section`)."""
    arms = arms_from_results(results)
    if not arms:
        raise ValueError("no results to report")
    base = baseline or next(iter(arms))
    control_pairs = default_controls(arms) if controls is None else list(controls)
    sections = [_arms_section(arms), _with_accepted(_family_section(arms), arms)]
    if tripwire:
        sections.insert(0, tripwire_section(tripwire))
    parts = parts_section(arms)
    if parts:
        sections.append(parts)
    sections.append(errors_section(arms))

    floor_section, floor = _floor_section(arms, control_pairs)
    sections.append(floor_section)
    sections.append(_paired_section(arms, base, control_pairs, floor))

    costs = arm_costs(arms)
    sections.append(_with_accepted(cost_section(costs), arms))
    return Report(tuple(sections), arms, details_section(arms), costs)


def write_report(
    results: Sequence[ItemResult],
    out_dir: Path,
    *,
    config: Config | None = None,
    **opts: object,
) -> dict[str, Path]:
    """Write report.md, report.html, details.md, accuracy.png (and frontier.png when an arm's
    cost is known) into `out_dir`; returns their paths. With the gateway's `config`, items its
    self-hosted nodes answered are priced by node-hours (`evals.cost.price_nodes`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        results = price_nodes(results, *node_map(config))
    report = build_report(results, **opts)  # type: ignore[arg-type]
    png = accuracy_chart(report.arms, out_dir / "accuracy.png")
    front = frontier_chart(report.costs, out_dir / "frontier.png")
    front_name = front.name if front else None
    details = out_dir / "details.md"
    details.write_text(report.details_markdown(), encoding="utf-8")
    md = out_dir / "report.md"
    md.write_text(report.markdown(png.name, front_name, details.name), encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(report.html(png.name, front_name), encoding="utf-8")
    paths = {"markdown": md, "html": page, "chart": png, "details": details}
    if front:
        paths["frontier"] = front
    return paths
