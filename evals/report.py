"""The run report: family table with intervals, sub-scores, paired results against the noise
floor, cost, and a chart of accuracy by family per arm — as Markdown, HTML and a PNG (plus a
quality-against-$/M scatter, `frontier.png`, when cost records exist).

Input is `ItemResult`s from one or more runs. An *arm* is one (run, target); its label is the
target name, or `target@run` when the same target appears in more than one run. By default
the first arm is the baseline every other arm is paired against, and every two arms with the
same target and the same sampling-parameter hash are taken as same-configuration-twice
controls that fix the noise floor. A pairing the statistics refuse (different sampling
parameters) is reported as refused, with the reason, rather than computed. So is a control
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evals.result import ItemResult, engines
from evals.stats import (
    NoiseFloor,
    Paired,
    PairingError,
    against_floor,
    by_family,
    pair,
)

RATE_COLUMNS = ("truncated", "unparsed", "degenerate", "timeout", "malformed", "error")


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    sections: tuple[Section, ...]
    arms: dict[str, list[ItemResult]] = field(default_factory=dict)

    def markdown(self, chart: str | None = None) -> str:
        out = ["# Plumbline eval report", ""]
        if chart:
            out += [f"![accuracy by family]({chart})", ""]
        for s in self.sections:
            out += [f"## {s.title}", ""]
            if s.headers:
                out.append("| " + " | ".join(s.headers) + " |")
                out.append("|" + "|".join("---" for _ in s.headers) + "|")
                out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in s.rows]
                out.append("")
            out += [*(f"- {n}" for n in s.notes), ""] if s.notes else []
        return "\n".join(out).rstrip() + "\n"

    def html(self, chart: str | None = None) -> str:
        body = ["<h1>Plumbline eval report</h1>"]
        if chart:
            body.append(f'<img src="{html.escape(chart)}" alt="accuracy by family">')
        for s in self.sections:
            body.append(f"<h2>{html.escape(s.title)}</h2>")
            if s.headers:
                head = "".join(f"<th>{html.escape(h)}</th>" for h in s.headers)
                rows = "".join(
                    "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                    for r in s.rows
                )
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            if s.notes:
                body.append(
                    "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.notes) + "</ul>"
                )
        return HTML_PAGE.format(body="\n".join(body))


HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Plumbline eval report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
{body}
</body></html>
"""


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
            )
        )
        if len(engines(rs)) > 1:
            notes.append(
                f"{label} was served by {len(engines(rs))} engines ({_engine_text(rs)}): its "
                "items do not come from one serving stack"
            )
    return Section(
        "Arms",
        ("arm", "target", "run", "items", "item set", "params hash", "engine"),
        tuple(rows),
        tuple(notes),
    )


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
    notes = ("Accuracy counts every item in the denominator; only `correct` is right.",)
    return Section("Accuracy by family", headers, tuple(rows), notes)


def _parts_section(arms: dict[str, list[ItemResult]]) -> Section | None:
    rows = []
    for label, rs in arms.items():
        by_fam: dict[str, list[ItemResult]] = defaultdict(list)
        for r in rs:
            if r.parts:
                by_fam[r.family].append(r)
        for family, frs in sorted(by_fam.items()):
            keys = sorted({k for r in frs for k in r.parts})
            shown = ", ".join(
                f"{k} {sum(r.parts.get(k, False) for r in frs) / len(frs):.3f}" for k in keys
            )
            rows.append((family, label, str(len(frs)), shown))
    if not rows:
        return None
    return Section("Sub-scores", ("family", "arm", "n", "rates"), tuple(rows))


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


def build_report(
    results: Sequence[ItemResult],
    *,
    baseline: str | None = None,
    controls: Sequence[tuple[str, str]] | None = None,
) -> Report:
    """Compute every section of the report from per-item results (pure)."""
    arms = arms_from_results(results)
    if not arms:
        raise ValueError("no results to report")
    labels = list(arms)
    base = baseline or labels[0]
    control_pairs = default_controls(arms) if controls is None else list(controls)
    sections = [_arms_section(arms), _family_section(arms)]
    parts = _parts_section(arms)
    if parts:
        sections.append(parts)

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
    sections.append(
        Section(
            "Noise floor (same configuration twice)",
            PAIR_HEADERS,
            tuple(floor_rows),
            tuple(floor_notes),
        )
    )

    control_set = {frozenset(c) for c in control_pairs}
    pair_rows, pair_notes = [], []
    for other in labels:
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
        pair_rows.append((*_pair_row(got), said))
    sections.append(
        Section(
            f"Paired against {base}",
            (*PAIR_HEADERS, "vs noise floor"),
            tuple(pair_rows),
            tuple(pair_notes),
        )
    )

    cost = _cost_section(arms)
    if cost:
        sections.append(cost)
    return Report(tuple(sections), arms)


def _cost_section(arms: dict[str, list[ItemResult]]) -> Section | None:
    rows = []
    for label, rs in arms.items():
        costs = [r.cost for r in rs if r.cost is not None]
        if not costs:
            continue
        s = by_family(rs)["overall"]
        tokens = sum(r.output_tokens or 0 for r in rs)
        per_m = f"{1e6 * sum(costs) / tokens:.3f}" if tokens else ""
        rows.append(
            (label, f"{s.accuracy:.3f}", f"{sum(costs):.4f}", per_m, f"{len(costs)}/{len(rs)}")
        )
    if not rows:
        return None
    return Section(
        "Quality against cost",
        ("arm", "accuracy", "total cost ($)", "$ per M output tokens", "items with cost"),
        tuple(rows),
    )


def chart(report: Report, path: Path) -> Path:
    """A PNG bar chart of accuracy by family per arm, with Wilson intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = {label: by_family(rs) for label, rs in report.arms.items()}
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
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cost_points(report: Report) -> dict[str, tuple[float, float]]:
    """Arm -> ($ per million output tokens, accuracy), for arms whose items carry cost."""
    points = {}
    for label, rs in report.arms.items():
        costs = [r.cost for r in rs if r.cost is not None]
        tokens = sum(r.output_tokens or 0 for r in rs)
        if costs and tokens:
            points[label] = (1e6 * sum(costs) / tokens, by_family(rs)["overall"].accuracy)
    return points


def frontier_chart(report: Report, path: Path) -> Path | None:
    """Quality against $/M output tokens, one point per arm with cost records (else None)."""
    points = cost_points(report)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (x, y) in points.items():
        ax.scatter([x], [y])
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
    ax.set_xlabel("$ per million output tokens")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(results: Sequence[ItemResult], out_dir: Path, **opts: object) -> dict[str, Path]:
    """Write report.md, report.html, accuracy.png (and frontier.png when costs exist) into
    `out_dir`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(results, **opts)  # type: ignore[arg-type]
    png = chart(report, out_dir / "accuracy.png")
    frontier = frontier_chart(report, out_dir / "frontier.png")
    md = out_dir / "report.md"
    md.write_text(report.markdown(png.name), encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(report.html(png.name), encoding="utf-8")
    paths = {"markdown": md, "html": page, "chart": png}
    if frontier:
        paths["frontier"] = frontier
    return paths
