"""Contest mathematics: multi-step problems with exact answers, generated from templates.

What it measures: whether a model carries a chain of exact arithmetic and counting to the end
— the family where quantisation damage shows first. In Sqwish Labs' published "Blackwell
inference benchmarks" (September 2026), a 27B model's four-bit post-training build scored 0.650
on maths against 0.939 for its FP8 release, a gap its logit-level comparison confirmed
independently (18% of top-1 tokens changed).

Where the items come from: templates (`evals/families/math_templates.py`), drawn with
`random.Random(seed)`. Every item is solved twice by independent methods (a closed form or library
routine against brute force or enumeration); an item whose two solvers disagree is dropped and
another is drawn. Parameter sizes
are chosen to defeat mental arithmetic, and no data is downloaded.

Optional slice (`build(..., reasoning_gym=k)`, default 0): the last k items come from the
`reasoning-gym` package's generators at hard settings (cryptarithm with 3-4 addends, countdown
with 5-6 numbers and targets 500-999, 5x5 zebra puzzles, 4-person knights and knaves), seeded
with the suite seed; each entry is stored whole in the item so it can be re-scored offline.
The package is imported only when the slice is asked for.

Answer format: the last non-empty line of the reply, after any reasoning, must be
`ANSWER: <value>`. Nothing else is parsed — no "last number in the text", no answer taken from
the reasoning, and an unterminated `<think>` block is unanswered (`Reply.answer_text`).

Scorers (both read the value with math-verify, `evals/families/math_answer.py`, which names the
few places where they depart from it):
    math_integer   an integer: `35`, `035`, `\\boxed{35}`, `$35$`, `35.0`, `70/2` and `x = 35` are
                   35; "3 or 5", "3,5" and "35 or 36" are sets, never 35. A multi-answer gold
                   (a list, `[3, 5]`) is a set, and only the same set is correct.
    math_symbolic  an exact closed form (plain `(3+sqrt(5))/2` or LaTeX `\\frac{3+\\sqrt{5}}{2}`),
                   equal when math-verify finds it so; a decimal is never an exact answer.
    math_reasoning_gym  the ANSWER line's value, graded by reasoning-gym's own scorer for the
                   item's dataset; only a full score (1.0) is correct (countdown's partial credit
                   for a wrong expression is not).
"""

from __future__ import annotations

import random
import re

import sympy

from evals.families.math_answer import judge
from evals.families.math_templates import TEMPLATES
from evals.item import Item, Reply, Verdict

NAME = "math"
DEFAULT_N = 100

PROMPT = """Solve the following problem. Reason step by step, then finish with one last line of \
the form

ANSWER: {form}

Problem: {question}"""

INTEGER_FORM = "<integer>"
SYMBOLIC_FORM = "<exact value, e.g. (1+sqrt(2))/3; no decimals>"

# The final line; markdown emphasis and inline-math dollars around it are tolerated.
ANSWER_LINE = re.compile(r"^[*_`$\s]*ANSWER[*_`\s]*:[*_`$\s]*(?P<value>.*?)[*_`$\s.]*$")

# reasoning-gym dataset -> hard configuration
REASONING_GYM: dict[str, dict[str, int]] = {
    "cryptarithm": {"min_words": 3, "max_words": 4},
    "countdown": {"min_numbers": 5, "max_numbers": 6, "min_target": 500, "max_target": 999},
    "zebra_puzzles": {"num_people": 5, "num_characteristics": 5},
    "knights_knaves": {"n_people": 4},
}
GYM_PROMPT = """{question}

Reason step by step, then finish with one last line of the form

ANSWER: <your final answer, in the format asked for above, on this one line>"""


def _gym_items(seed: int, k: int, start: int) -> list[Item]:
    import reasoning_gym  # heavy (several seconds); only when the slice is asked for

    names = list(REASONING_GYM)
    per = {name: k // len(names) + (i < k % len(names)) for i, name in enumerate(names)}
    items: list[Item] = []
    for name in names:
        if not per[name]:
            continue
        dataset = reasoning_gym.create_dataset(
            name, size=per[name], seed=seed, **REASONING_GYM[name]
        )
        for entry in dataset:
            items.append(
                Item(
                    id=f"math-{start + len(items):03d}-rg-{name}",
                    family=NAME,
                    messages=(
                        {"role": "user", "content": GYM_PROMPT.format(question=entry["question"])},
                    ),
                    answer={"dataset": name, "entry": entry},
                    scorer="math_reasoning_gym",
                    meta={"template": f"reasoning_gym:{name}", "seed": seed},
                )
            )
    return items


def _agree(scorer: str, a: object, b: object) -> bool:
    if a is None or b is None:
        return False
    if scorer == "math_symbolic":
        return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
    return a == b


def build(seed: int = 0, n: int = DEFAULT_N, *, reasoning_gym: int = 0, **_: object) -> list[Item]:
    """`n` items: templates in turn, each drawn until its two solvers agree; the last
    `reasoning_gym` of them from reasoning-gym's generators instead."""
    rng = random.Random(f"math:{seed}")
    names = list(TEMPLATES)
    items = []
    for i in range(n - reasoning_gym):
        name = names[i % len(names)]
        generate, scorer = TEMPLATES[name]
        question, a, b = generate(rng)
        while not question or not _agree(scorer, a, b):
            question, a, b = generate(rng)
        form = SYMBOLIC_FORM if scorer == "math_symbolic" else INTEGER_FORM
        items.append(
            Item(
                id=f"math-{i:03d}-{name}",
                family=NAME,
                messages=(
                    {"role": "user", "content": PROMPT.format(form=form, question=question)},
                ),
                answer=a,
                scorer=scorer,
                meta={"template": name, "seed": seed},
            )
        )
    if reasoning_gym:
        items += _gym_items(seed, reasoning_gym, start=len(items))
    return items


# ----------------------------------------------------------------------------- scoring


def final_answer(reply: Reply) -> str | None:
    """The value on the reply's last non-empty line if that line is `ANSWER: ...`, else None."""
    return reply.final_value(ANSWER_LINE)


def score_integer(item: Item, reply: Reply) -> Verdict:
    """An integer (or a set of integers), read and compared by math-verify
    (`evals/families/math_answer.py`)."""
    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    return judge(item.answer, value, exact=False)


def score_symbolic(item: Item, reply: Reply) -> Verdict:
    """An exact closed form (or a set of them): as `score_integer`, and a decimal is wrong."""
    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    return judge(item.answer, value, exact=True)


def score_reasoning_gym(item: Item, reply: Reply) -> Verdict:
    import reasoning_gym

    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    grade = reasoning_gym.get_score_answer_fn(item.answer["dataset"])
    try:
        score = grade(value, item.answer["entry"])
    except Exception as exc:  # a grader that chokes on an answer has not accepted it
        return Verdict("wrong", f"reasoning-gym grader raised {type(exc).__name__}", value)
    return Verdict("correct" if score == 1.0 else "wrong", f"reasoning-gym score {score}", value)


SCORERS = {
    "math_integer": score_integer,
    "math_symbolic": score_symbolic,
    "math_reasoning_gym": score_reasoning_gym,
}
