"""Long context: find needles in a synthetic haystack sized to the served context window.

What it measures: retrieval across the whole window the target says it serves — the family
where a wrong RoPE scaling, a truncating template or a broken KV-cache layout shows.

Where the items come from: generated with the seed. The haystack is synthetic service-log lines
built from word lists (no essays: no copyright, nothing memorised). Each item fills a fraction
(25/50/75/90 %) of the usable window — `window` minus `reserve` tokens left for the answer —
measured with `count_tokens` (the runner backs it with the upstream's /tokenize; the default is
an approximation of 3 characters a token). Needles sit at depths 0.1 ... 0.9. Task kinds:

    needle     one vault code, among distractor vaults whose names differ by one character
    multikey   the codes of three vaults, asked together
    multihop   vault A "forwards to" vault B (the two facts at different depths); asked for
               the code of the vault A forwards to

Answer format: last line `ANSWER: <code>` (multikey: the codes separated by commas).
Scorer `longctx_exact`: the set of codes on the answer line must equal the expected set
exactly (case-insensitive), nothing missing and nothing extra.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import partial

from evals.families.math import final_answer
from evals.item import Item, Reply, Verdict

NAME = "longctx"
DEFAULT_N = 40
DEFAULT_WINDOW = 8192
FILLS = (0.25, 0.5, 0.75, 0.9)
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
KINDS = ("needle", "multikey", "multihop")

PROMPT = """Below is a service log. Somewhere in it are notes about vaults and their access \
codes. Read it, then answer the question after it.

<log>
{haystack}
</log>

Question: {question}
Finish with one last line of the form
ANSWER: {form}"""

QUESTIONS = {
    "needle": ("What is the access code for vault {keys[0]}?", "<code>"),
    "multikey": (
        "What are the access codes for vaults {keys[0]}, {keys[1]} and {keys[2]}?",
        "<code>, <code>, <code>",
    ),
    "multihop": (
        "Vault {keys[0]} forwards to another vault. What is the access code of that vault?",
        "<code>",
    ),
}
CODE_FACT = "NOTE: the access code for vault {key} is {code}."
HOP_FACT = "NOTE: vault {key} forwards to vault {target}."
SEPARATORS = re.compile(r"[,\s]+")

SERVICES = ("ledger", "billing", "search", "gateway", "auth", "mailer", "indexer", "cache")
WORDS = (
    "amber",
    "river",
    "quiet",
    "stone",
    "maple",
    "cedar",
    "harbor",
    "violet",
    "copper",
    "meadow",
    "falcon",
    "ember",
    "glacier",
    "willow",
    "summit",
    "lantern",
    "orchid",
    "prairie",
)
STATUSES = ("ok", "ok", "ok", "retry", "slow", "ok", "degraded")
VAULT_WORDS = ("maple", "cobalt", "raven", "tundra", "saffron", "juniper", "onyx", "kestrel")

TokenCounter = Callable[[str], int]


def approximate_tokens(text: str) -> int:
    """Used when no tokenizer is given: about 3 characters a token for this log text."""
    return len(text) // 3 + 1


def _log_line(rng: random.Random) -> str:
    return (
        f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
        f"node-{rng.randint(1, 64)} service={rng.choice(SERVICES)} "
        f"status={rng.choice(STATUSES)} latency_ms={rng.randint(2, 900)} "
        f"note={' '.join(rng.sample(WORDS, 3))}"
    )


def _vault(rng: random.Random) -> str:
    return f"{rng.choice(VAULT_WORDS)}-{rng.randint(1000, 9999)}"


def _near_miss(rng: random.Random, key: str) -> str:
    """Another vault name one digit away from `key`."""
    word, digits = key.split("-")
    pos = rng.randrange(len(digits))
    swap = rng.choice([d for d in "0123456789" if d != digits[pos]])
    return f"{word}-{digits[:pos]}{swap}{digits[pos + 1 :]}"


def _code(rng: random.Random) -> str:
    return f"{rng.getrandbits(32):08x}"


def _facts(
    kind: str, rng: random.Random, depths: list[float]
) -> tuple[list[str], list[tuple[float, str]], list[str]]:
    """(asked keys, [(depth, fact line)], expected codes) for one item."""
    taken: set[str] = set()

    def fresh(make: Callable[[], str]) -> str:
        key = make()
        while key in taken:
            key = make()
        taken.add(key)
        return key

    asked = [fresh(partial(_vault, rng)) for _ in range(3 if kind == "multikey" else 1)]
    codes = [_code(rng) for _ in asked]
    facts = [
        (d, CODE_FACT.format(key=k, code=c)) for d, k, c in zip(depths, asked, codes, strict=False)
    ]
    if kind == "multihop":
        target = fresh(partial(_vault, rng))
        codes = [_code(rng)]
        decoy = fresh(lambda: _near_miss(rng, target))
        facts = [
            (depths[0], HOP_FACT.format(key=asked[0], target=target)),
            (depths[1], CODE_FACT.format(key=target, code=codes[0])),
            (depths[2], CODE_FACT.format(key=decoy, code=_code(rng))),
        ]
    for key in list(asked):  # distractors: near-miss vault names with their own codes
        for _ in range(2):
            near = fresh(partial(_near_miss, rng, key))
            facts.append((rng.random(), CODE_FACT.format(key=near, code=_code(rng))))
    return asked, facts, codes


def _prompt(lines: list[str], facts: list[tuple[float, str]], question: str, form: str) -> str:
    placed = list(lines)
    for depth, fact in sorted(facts, key=lambda f: f[0], reverse=True):
        placed.insert(round(depth * len(lines)), fact)
    return PROMPT.format(haystack="\n".join(placed), question=question, form=form)


def _sized(
    rng: random.Random,
    target: int,
    render: Callable[[list[str]], str],
    count_tokens: TokenCounter,
) -> tuple[str, int]:
    """Grow/shrink the haystack until the rendered prompt is within 2% under `target` tokens."""
    lines = [_log_line(rng) for _ in range(max(1, target // 40))]
    for _ in range(8):
        tokens = count_tokens(render(lines))
        if target * 0.98 <= tokens <= target:
            break
        per_line = max(1.0, tokens / len(lines))
        wanted = max(1, len(lines) + int((target * 0.99 - tokens) / per_line))
        while len(lines) < wanted:
            lines.append(_log_line(rng))
        del lines[wanted:]
    text = render(lines)
    return text, count_tokens(text)


def build(
    seed: int = 0,
    n: int = DEFAULT_N,
    *,
    window: int = DEFAULT_WINDOW,
    reserve: int | None = None,
    count_tokens: TokenCounter | None = None,
    **_: object,
) -> list[Item]:
    """`n` items for a `window`-token context; `reserve` tokens are left for the answer."""
    rng = random.Random(f"longctx:{seed}:{window}")
    count = count_tokens or approximate_tokens
    usable = window - (reserve if reserve is not None else max(512, window // 4))
    if usable < 256:
        raise ValueError(f"window {window} leaves {usable} tokens for the haystack")
    items = []
    for i in range(n):
        kind, fill = KINDS[i % len(KINDS)], FILLS[(i // len(KINDS)) % len(FILLS)]
        depths = [DEPTHS[(i + j * 2) % len(DEPTHS)] for j in range(3)]
        asked, facts, codes = _facts(kind, rng, depths)
        question, form = QUESTIONS[kind]
        question = question.format(keys=asked)
        text, tokens = _sized(
            rng,
            int(fill * usable),
            partial(_prompt, facts=facts, question=question, form=form),
            count,
        )
        items.append(
            Item(
                id=f"longctx-{i:03d}-{kind}",
                family=NAME,
                messages=({"role": "user", "content": text},),
                answer=codes,
                scorer="longctx_exact",
                meta={
                    "kind": kind,
                    "fill": fill,
                    "depths": depths,
                    "prompt_tokens": tokens,
                    "window": window,
                    "tokenizer": "given" if count_tokens else "approximate",
                },
            )
        )
    return items


def score_exact(item: Item, reply: Reply) -> Verdict:
    value = final_answer(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    got = [v.casefold() for v in SEPARATORS.split(value.strip("<>. ")) if v]
    want = [c.casefold() for c in item.answer]
    ok = sorted(got) == sorted(want)
    return Verdict("correct" if ok else "wrong", "", got)


SCORERS = {"longctx_exact": score_exact}
