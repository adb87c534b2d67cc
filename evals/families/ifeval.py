"""Instruction following: IFEval's verifiable instructions, checked by IFEval's reference code.

What it measures: whether the *answer* (never the reasoning) obeys explicit, mechanically
checkable constraints — case, length, layout, keywords, language, start/end markers. A model
that lets its chain of thought leak into the answer fails here first (Sqwish Labs'
published "Blackwell inference benchmarks", September 2026: 0.317 against 0.833 with and
without a reasoning parser).

Where the items come from: twenty base writing tasks in this file, each combined with one to
three instructions of IFEval's registry, worded by the registry itself (`build_description`)
with arguments drawn from the seed (`evals/families/ifeval_instructions.py`). Combinations the
registry's own `INSTRUCTION_CONFLICTS` refuses are never drawn. The registry is lm-eval's copy
of Google's IFEval checkers, loaded offline (`evals/families/ifeval_registry.py`); the two
instructions that need nltk's punkt data (number of sentences, capital-word frequency) are not
asked, every other one is, `language:response_language` included.

Scoring (`ifeval`): the outcome is the reference's *strict* prompt-level verdict
(`test_instruction_following_strict`: every instruction holds on the answer as given), so the
headline reads as IFEval's prompt-level strict accuracy. `Verdict.parts` carries `strict` (the
same) and `loose` (the reference's `test_instruction_following_loose`: any of the answer's
variants with the first line, the last line or both removed, each with and without `*`). The
suite keeps no checker of its own, so there is no other sub-score.
What the reference is given is the answer: text after the last `</think>` (reasoning is never
graded); an unterminated `<think>` or an empty answer is `unparsed`, repetition collapse is
`degenerate` — both before the reference is asked.
"""

from __future__ import annotations

import random

from evals.families.ifeval_instructions import DRAWS
from evals.families.ifeval_registry import conflicts, describe, follows, offline_ids
from evals.item import Item, Reply, Verdict
from gateway.serving.degeneration import reply_degeneration

NAME = "ifeval"
PARTS = ("strict", "loose")
HEADLINE = (
    "accuracy is IFEval's prompt-level strict verdict from lm-eval's instruction registry "
    "(loose: the reference's relaxed reading)"
)
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
    """`n` items; item k's first instruction cycles through every offered id, 0-2 more drawn."""
    rng = random.Random(f"ifeval:{seed}")
    ids = offline_ids()
    tasks = list(TASKS)
    rng.shuffle(tasks)
    items: list[Item] = []
    for k in range(n):
        task = tasks[k % len(tasks)]
        chosen = [ids[k % len(ids)]]
        for _extra in range(rng.randint(0, 2)):
            options = [c for c in ids if not any(conflicts(c, x) for x in chosen)]
            if options:
                chosen.append(rng.choice(options))
        kwargs = [DRAWS[c](rng, task) for c in chosen]
        text = "\n".join(describe(c, kw) for c, kw in zip(chosen, kwargs, strict=True))
        prompt = f"{task}\n\n{text}"
        items.append(
            Item(
                id=f"ifeval-{k:03d}",
                family=NAME,
                messages=({"role": "user", "content": prompt},),
                answer={"instruction_id_list": chosen, "kwargs": kwargs, "prompt": prompt},
                scorer="ifeval",
                meta={"seed": seed, "kinds": chosen, "reference": "lm-eval ifeval"},
            )
        )
    return items


# ----------------------------------------------------------------------------- scoring


def response(reply: Reply) -> str | None:
    """What the reference is given: the content after the last `</think>`, not stripped.

    None when there is no answer (`Reply.answer_text`: empty, or a `<think>` left open)."""
    if reply.answer_text() is None or reply.content is None:
        return None
    close = reply.content.rfind("</think>")
    return reply.content[close + len("</think>") :] if close >= 0 else reply.content


def score(item: Item, reply: Reply) -> Verdict:
    found = reply_degeneration(reply.content, reply.reasoning)
    if found:
        return Verdict("degenerate", f"{found.rule}: {found.detail}")
    text = response(reply)
    if text is None:
        return Verdict("unparsed", "no answer (empty, or an unterminated <think>)")
    if "instruction_id_list" not in item.answer:
        return Verdict("error", "item built by an earlier ifeval builder (no reference ids)")
    ids: list[str] = item.answer["instruction_id_list"]
    try:
        followed = follows(item.answer["prompt"], ids, item.answer["kwargs"], text)
    except Exception as exc:  # noqa: BLE001 - the reference has no verdict for this answer
        return Verdict("wrong", f"the IFEval reference raised {type(exc).__name__}: {exc}")
    failed = [i for i, ok in zip(ids, followed.strict, strict=True) if not ok]
    return Verdict(
        "correct" if all(followed.strict) else "wrong",
        f"failed: {', '.join(failed)}" if failed else "",
        extracted=followed.strict,
        parts={"strict": all(followed.strict), "loose": all(followed.loose)},
    )


SCORERS = {"ifeval": score}
