"""How often the suite's headline agrees with each benchmark's reference, on constructed answers.

    python bench/scorer_agreement.py                  # the working tree's scorers
    python bench/scorer_agreement.py --rev main~5     # the scorers of a git revision ("before")
    python bench/scorer_agreement.py --family tools --out ''   # print only

tools: every entry of BFCL's simple, multiple, parallel, parallel_multiple and irrelevance
sets, each with its constructed answers (`evals.families.tools_probes`: the answer set's own
correct answers, near misses, known tricks), scored by the suite and by `bfcl_eval` itself.
ifeval: the probe cases of `evals.families.ifeval_probes` (one instruction each, plain and
behind a `<think>` block), and the items of seeds 0-3 answered with every probe response of
their first instruction (several instructions at once), scored by the suite and by IFEval's
reference (lm-eval's registry).

`--rev` loads the family's scorer as it was at that revision (the probes and the references
are today's): tools through its `_item`/`item_for` and `score_ast`; ifeval, whose items then
had the suite's own kinds, through its old checkers with the reference's arguments renamed to
its own (an instruction it did not have is not checked, as it was not then).

Prints one table and writes the figures, with the revision and date, to
`bench/results/scorer_agreement-<rev>-<date>.json` (`--out` to change, '' for none).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import logging
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evals.families import ifeval, ifeval_probes, tools, tools_probes  # noqa: E402
from evals.item import Item, Reply  # noqa: E402
from gateway.serving.degeneration import reply_degeneration  # noqa: E402

THINK = "<think>Let me think, then answer.</think>"
# The reference's argument names -> the suite's own, for the ifeval kinds of earlier revisions.
OLD_KWARGS = {
    "keywords:frequency": {"keyword": "word", "frequency": "n"},
    "keywords:forbidden_words": {"forbidden_words": "forbidden"},
    "keywords:letter_frequency": {"let_frequency": "n", "let_relation": "relation"},
    "length_constraints:number_paragraphs": {"num_paragraphs": "n"},
    "length_constraints:number_words": {"num_words": "n"},
    "length_constraints:nth_paragraph_first_word": {
        "num_paragraphs": "n",
        "nth_paragraph": "i",
        "first_word": "word",
    },
    "detectable_content:number_placeholders": {"num_placeholders": "n"},
    "detectable_content:postscript": {"postscript_marker": "marker"},
    "detectable_format:number_bullet_lists": {"num_bullets": "n"},
    "detectable_format:number_highlighted_sections": {"num_highlights": "n"},
    "detectable_format:multiple_sections": {"section_spliter": "splitter", "num_sections": "n"},
    "startend:end_checker": {"end_phrase": "phrase"},
}


def module_at(rev: str, path: str, name: str) -> ModuleType:
    """`path` as it was at git revision `rev`, imported under `name`."""
    text = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    folder = Path(tempfile.mkdtemp(prefix="agreement-"))
    (folder / f"{name}.py").write_text(text)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- tools


def tools_sweep(rev: str | None) -> dict[str, Any]:
    family = module_at(rev, "evals/families/tools.py", "tools_at_rev") if rev else tools
    build = getattr(family, "item_for", None) or family._item
    agree: Counter[str] = Counter()
    total: Counter[str] = Counter()
    strict_agree = 0
    disagree: Counter[str] = Counter()
    for category in tools.CATEGORIES:
        for entry, truth in tools.entries(category):
            item = build(category, entry, truth)
            for probe in tools_probes.probes(item):
                reference = tools_probes.reference(category, entry, truth, probe)
                verdict = family.score_ast(item, tools_probes.reply(probe))
                total[category] += 1
                if verdict.correct == reference:
                    agree[category] += 1
                else:
                    side = "suite stricter" if reference else "suite looser"
                    disagree[f"{side}: {probe.kind}"] += 1
                strict_agree += verdict.parts.get("tools_strict", verdict.correct) == reference
    return {
        "pairs": sum(total.values()),
        "agreement": sum(agree.values()) / sum(total.values()),
        "per_category": {c: {"pairs": total[c], "agreement": agree[c] / total[c]} for c in total},
        "tools_strict_agreement": strict_agree / sum(total.values()),
        "disagreements": dict(disagree.most_common()),
    }


# ----------------------------------------------------------------------------- ifeval


def ifeval_pairs() -> list[tuple[str, list[str], list[dict[str, Any]], str, str]]:
    """(label, instruction ids, kwargs, prompt, response) for every constructed answer."""
    pairs = []
    for case in ifeval_probes.CASES:
        for wrap in ("", THINK):
            label = f"{case.instruction}/{case.label}{' (after <think>)' if wrap else ''}"
            pairs.append((label, [case.instruction], [case.kwargs], "Write.", wrap + case.response))
    for seed in range(4):
        for it in ifeval.build(seed):
            ids, kwargs = it.answer["instruction_id_list"], it.answer["kwargs"]
            for case in ifeval_probes.CASES:
                if case.instruction == ids[0]:
                    label = f"combined/{case.instruction}/{case.label}"
                    pairs.append((label, ids, kwargs, it.answer["prompt"], case.response))
    return pairs


def old_ifeval_verdict(
    kinds: ModuleType, ids: list[str], kwargs: list[dict[str, Any]], text: str
) -> bool:
    """An earlier revision's verdict: its own checkers, strict, on the answer text."""
    reply = Reply(text)
    if reply_degeneration(reply.content, None) or reply.answer_text() is None:
        return False
    answer = reply.answer_text() or ""
    for instruction, kw in zip(ids, kwargs, strict=True):
        if instruction not in kinds.KINDS:
            continue  # not checked then
        renames = OLD_KWARGS.get(instruction, {})
        old = {renames.get(k, k): v for k, v in kw.items()}
        if not kinds.KINDS[instruction].check(answer, old):
            return False
    return True


def ifeval_sweep(rev: str | None) -> dict[str, Any]:
    kinds = (
        module_at(rev, "evals/families/ifeval_instructions.py", "ifeval_at_rev") if rev else None
    )
    agree: Counter[str] = Counter()
    total: Counter[str] = Counter()
    disagree: Counter[str] = Counter()
    for label, ids, kwargs, prompt, response in ifeval_pairs():
        text = response.split("</think>")[-1]
        reference = ifeval_probes.reference_all(ids, kwargs, text)
        if kinds is not None:
            suite = old_ifeval_verdict(kinds, ids, kwargs, response)
        else:
            answer = {"instruction_id_list": ids, "kwargs": kwargs, "prompt": prompt}
            item = Item("p", "ifeval", ({"role": "user", "content": prompt},), answer, "ifeval")
            suite = ifeval.score(item, Reply(response)).correct
        subset = "combined items" if label.startswith("combined/") else "one instruction"
        total[subset] += 1
        if suite == reference:
            agree[subset] += 1
        else:
            disagree[f"{'suite stricter' if reference else 'suite looser'}: {label}"] += 1
    return {
        "pairs": sum(total.values()),
        "agreement": sum(agree.values()) / sum(total.values()),
        "per_subset": {k: {"pairs": total[k], "agreement": agree[k] / total[k]} for k in total},
        "disagreements": dict(disagree.most_common()),
    }


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=("tools", "ifeval", "all"), default="all")
    parser.add_argument("--rev", default=None, help="score with the scorers of this git revision")
    parser.add_argument("--out", default=None, help="JSON path ('' for none)")
    args = parser.parse_args()
    # The reference logs an error for every text langdetect finds no features in (and counts
    # the instruction followed, as it should); thousands of probes make that noise.
    logging.getLogger("lm_eval").setLevel(logging.CRITICAL)
    head = subprocess.run(
        ["git", "rev-parse", "--short", args.rev or "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scorers_at": head + ("" if args.rev else " (working tree)"),
        "references": {
            "tools": "bfcl-eval 2026.3.23 ast_checker",
            "ifeval": "lm-eval 0.4.13 ifeval",
        },
    }
    if args.family in ("tools", "all"):
        result["tools"] = tools_sweep(args.rev)
    if args.family in ("ifeval", "all"):
        result["ifeval"] = ifeval_sweep(args.rev)
    for family in ("tools", "ifeval"):
        if family in result:
            r = result[family]
            print(f"{family:7s} {r['pairs']:6d} pairs  agreement {100 * r['agreement']:.2f}%")
            for part, sub in {**r.get("per_category", {}), **r.get("per_subset", {})}.items():
                print(f"          {part:18s} {sub['pairs']:6d}  {100 * sub['agreement']:.2f}%")
            for key, count in list(r["disagreements"].items())[:8]:
                print(f"          {count:5d}  {key}")
    if "tools" in result:
        print(f"tools_strict agreement {100 * result['tools']['tools_strict_agreement']:.2f}%")
    out = args.out
    if out is None:
        stamp = result["date"][:10]
        out = str(ROOT / "bench" / "results" / f"scorer_agreement-{head}-{stamp}.json")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
