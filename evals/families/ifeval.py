"""Instruction following: IFEval-style verifiable instructions, checked offline.

What it measures: whether the *answer* (never the reasoning) obeys explicit, mechanically
checkable constraints — case, length, layout, keywords, start/end markers. A model that lets
its chain of thought leak into the answer fails here first (reference 002: 0.317 against 0.833
with and without a reasoning parser).

Where the items come from: twenty base writing tasks in this file, each combined with one to
three instructions drawn with a fixed seed from the 24 checker kinds of
`evals/families/ifeval_instructions.py` (IFEval's taxonomy, re-implemented there without nltk or
any download; IFEval's `language` checker is left out because no offline detector is reliable
enough on short texts). Combinations that cannot both hold (lowercase and uppercase; JSON and
paragraphs; an end phrase and a postscript) are excluded by `conflicts`.

Scoring (`ifeval`): *strict* — every instruction holds on the answer as given; *loose* — IFEval's
relaxed reading: an instruction holds if it holds on any of the answer's variants with the
first line, the last line or both removed, each with and without markdown `*` characters.
The outcome is `correct` only when strict holds; `Verdict.parts` carries `strict` and `loose`.
An unterminated `<think>` is `unparsed`; repetition collapse is `degenerate`.
"""

from __future__ import annotations

import random
from typing import Any

from evals.families.ifeval_instructions import KINDS, conflicts, describe
from evals.item import Item, Reply, Verdict
from gateway.trust.degeneration import reply_degeneration

NAME = "ifeval"
PARTS = ("strict", "loose")
DEFAULT_N = 60

TASKS: tuple[str, ...] = (
    "Write a short blog post about a weekend trip to the mountains.",
    "Write a cover letter for a job at a neighbourhood bakery.",
    "Write a product description for a solar-powered garden lamp.",
    "Explain to a ten-year-old how the gears on a bicycle work.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Write a review of a fictional restaurant called The Blue Fig.",
    "Describe the water cycle.",
    "Write an email to a colleague proposing a weekly team lunch.",
    "Write a poem about autumn in a big city.",
    "Give advice to a student preparing for their first marathon.",
    "Summarise the benefits of learning a second language.",
    "Write a short speech for the opening of a public library.",
    "Explain what a database index is and why it makes queries faster.",
    "Describe a typical day in the life of a beekeeper.",
    "Write a pitch for a mobile app that reminds people to drink water.",
    "Explain the difference between weather and climate.",
    "Write a letter to yourself to be opened in ten years.",
    "Write a short history of the printing press.",
    "Write an advertisement for a hand-made wooden chess set.",
    "Describe how to plant and care for a tomato plant.",
)

# ----------------------------------------------------------------------------- builder


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` items; item k's first instruction cycles through every kind, 0-2 more are drawn."""
    rng = random.Random(f"ifeval:{seed}")
    kinds = sorted(KINDS)
    tasks = list(TASKS)
    rng.shuffle(tasks)
    items: list[Item] = []
    for k in range(n):
        task = tasks[k % len(tasks)]
        chosen = [kinds[k % len(kinds)]]
        for _extra in range(rng.randint(0, 2)):
            options = [c for c in kinds if not any(conflicts(c, x) for x in chosen)]
            if options:
                chosen.append(rng.choice(options))
        instructions: list[dict[str, Any]] = [
            {"kind": c, "kwargs": KINDS[c].draw(rng, task)} for c in chosen
        ]
        text = "\n".join(describe(i["kind"], i["kwargs"]) for i in instructions)
        items.append(
            Item(
                id=f"ifeval-{k:03d}",
                family=NAME,
                messages=({"role": "user", "content": f"{task}\n\n{text}"},),
                answer={"instructions": instructions},
                scorer="ifeval",
                meta={"seed": seed, "kinds": chosen},
            )
        )
    return items


# ----------------------------------------------------------------------------- scoring


def loose_variants(text: str) -> list[str]:
    """IFEval's relaxed readings: first/last line removed, markdown `*` removed."""
    lines = text.split("\n")
    bases = [
        text,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    variants = bases + [b.replace("*", "") for b in bases]
    return [v for v in variants if v.strip()]


def follows(text: str, instruction: dict[str, Any], loose: bool = False) -> bool:
    kind = KINDS[instruction["kind"]]
    texts = loose_variants(text) if loose else [text]
    return any(kind.check(t, instruction["kwargs"]) for t in texts)


def score(item: Item, reply: Reply) -> Verdict:
    found = reply_degeneration(reply.content, reply.reasoning)
    if found:
        return Verdict("degenerate", f"{found.rule}: {found.detail}")
    text = reply.answer_text()
    if text is None:
        return Verdict("unparsed", "no answer (empty, or an unterminated <think>)")
    instructions = item.answer["instructions"]
    strict = [follows(text, i) for i in instructions]
    loose = [follows(text, i, loose=True) for i in instructions]
    failed = [i["kind"] for i, ok in zip(instructions, strict, strict=True) if not ok]
    return Verdict(
        "correct" if all(strict) else "wrong",
        f"failed: {', '.join(failed)}" if failed else "",
        parts={"strict": all(strict), "loose": all(loose)},
    )


SCORERS = {"ifeval": score}
