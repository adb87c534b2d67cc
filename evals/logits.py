"""Logit-level divergence between two targets, read against a control pair.

Input per target: one dict per generated position, token -> logprob, the top-k the server
returned (`top_logprobs`, k <= 20 on vLLM). Two measures per pair of positions:

- top-1 agreement: the most likely token is the same on both sides;
- KL(A || B) over the *union* of the two top-k supports. A token one side did not list is
  given, on that side, the residual mass the side left unlisted (1 - sum of its listed
  probabilities) spread evenly over the tokens it is missing, but never more than the
  smallest probability it did list (an unlisted token cannot be likelier than a listed one)
  and never less than `MISSING_FLOOR` (so KL stays finite). Each side is then renormalised
  over the union. With full-support inputs this is the exact KL.

Contexts must be identical for positions to be comparable. Two collectors:

- `collect_echo` (what `plumbline eval logits` uses) scores fixed texts (`TEXTS`: a question
  and a fixed answer) on both targets: `/v1/completions` with `echo=True`, `logprobs=k`,
  `max_tokens=1` returns the top-k at every position of the text itself (vLLM computes them as
  prompt logprobs), and the one generated token is cut off. Every position has the same
  context on both sides — the teacher-forced comparison — so a text of N tokens gives N - 1
  positions (the first token has no distribution) however an instruct model would have
  answered. The two servers must tokenise the text identically, or it raises.
- `collect` generates greedily on both targets from the same prompts; positions are compared
  while the two sampled sequences agree, up to and including the first position where they
  differ (after that the contexts differ). On an instruct model fed a bare prompt this is
  often one position per prompt (the first token already differs, or is the end of text), so
  it is kept only for servers without echo.
 A control pair — the same configuration served twice — gives the floor every other
pair is read against (`against_control`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TopK = dict[str, float]  # token -> logprob
MISSING_FLOOR = 1e-6


def _support(side: TopK, union: set[str]) -> dict[str, float]:
    probs = {tok: math.exp(lp) for tok, lp in side.items()}
    missing = union - probs.keys()
    if missing:
        residual = max(0.0, 1.0 - sum(probs.values()))
        fill = min(residual / len(missing), min(probs.values()) if probs else 1.0)
        fill = max(fill, MISSING_FLOOR)
        probs.update(dict.fromkeys(missing, fill))
    total = sum(probs.values())
    return {tok: p / total for tok, p in probs.items()}


def kl(a: TopK, b: TopK) -> float:
    """KL(A || B) over the union of the two top-k supports (see module doc)."""
    union = set(a) | set(b)
    if not union:
        raise ValueError("both top-k dicts are empty")
    pa, pb = _support(a, union), _support(b, union)
    return sum(p * math.log(p / pb[tok]) for tok, p in pa.items() if p > 0)


def top1(side: TopK) -> str:
    return max(side.items(), key=lambda kv: (kv[1], kv[0]))[0]


@dataclass(frozen=True, slots=True)
class Divergence:
    positions: int
    top1_agreement: float
    mean_kl: float


def divergence(a: Sequence[TopK], b: Sequence[TopK]) -> Divergence:
    """Top-1 agreement and mean KL over aligned positions (the lists must be equally long)."""
    if len(a) != len(b):
        raise ValueError(f"position counts differ: {len(a)} != {len(b)}")
    if not a:
        raise ValueError("no positions to compare")
    agree = sum(top1(x) == top1(y) for x, y in zip(a, b, strict=True))
    total_kl = sum(kl(x, y) for x, y in zip(a, b, strict=True))
    return Divergence(len(a), agree / len(a), total_kl / len(a))


def aligned(
    a_tokens: Sequence[str], a_top: Sequence[TopK], b_tokens: Sequence[str], b_top: Sequence[TopK]
) -> tuple[list[TopK], list[TopK]]:
    """Positions with identical contexts: while the sampled tokens agree, plus the first split."""
    out_a: list[TopK] = []
    out_b: list[TopK] = []
    for ta, tb, xa, xb in zip(a_tokens, b_tokens, a_top, b_top, strict=False):
        out_a.append(xa)
        out_b.append(xb)
        if ta != tb:
            break
    return out_a, out_b


@dataclass(frozen=True, slots=True)
class ControlVerdict:
    excess_kl: float
    agreement_drop: float
    above_floor: bool


def against_control(pair: Divergence, control: Divergence) -> ControlVerdict:
    """A pair is above the floor when it diverges more than the control on both measures."""
    excess = pair.mean_kl - control.mean_kl
    drop = control.top1_agreement - pair.top1_agreement
    return ControlVerdict(excess, drop, excess > 0 and drop > 0)


async def _generate(
    client: Any, model: str, prompt: str, max_tokens: int, top: int
) -> tuple[list[str], list[TopK]]:
    resp = await client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=top
    )
    lp = resp.choices[0].logprobs
    if lp is None or lp.top_logprobs is None:
        raise ValueError(f"{model}: the server returned no logprobs")
    return list(lp.tokens), [dict(d or {}) for d in lp.top_logprobs]


async def collect(
    a: tuple[Any, str],
    b: tuple[Any, str],
    prompts: Sequence[str],
    *,
    max_tokens: int = 64,
    top: int = 20,
) -> tuple[list[TopK], list[TopK]]:
    """Greedy completions with top-`top` logprobs on two (AsyncOpenAI client, model) targets;
    returns the aligned per-position top-k lists over all prompts, ready for `divergence`."""
    all_a: list[TopK] = []
    all_b: list[TopK] = []
    for prompt in prompts:
        (ta, xa), (tb, xb) = await asyncio.gather(
            _generate(a[0], a[1], prompt, max_tokens, top),
            _generate(b[0], b[1], prompt, max_tokens, top),
        )
        pa, pb = aligned(ta, xa, tb, xb)
        all_a.extend(pa)
        all_b.extend(pb)
    return all_a, all_b


# Fixed texts for the teacher-forced comparison: a question and a fixed answer, so every token of
# the answer (and of the question) is a position, whatever either model would have said next.
TEXTS: tuple[str, ...] = (
    "Question: What is the capital of France?\nAnswer: The capital of France is Paris, which "
    "lies on the river Seine in the north of the country and is also its largest city.",
    "Question: What is 12 + 30?\nAnswer: Adding twelve and thirty gives forty-two, so the "
    "answer is 42. You can check it by counting up from thirty in steps of one.",
    "Question: How many legs does a spider have?\nAnswer: A spider has eight legs. Insects have "
    "six, which is one of the ways to tell the two groups of animals apart.",
    "Question: Which planet is the largest in our solar system?\nAnswer: Jupiter is the largest "
    "planet. It is a gas giant, more than eleven times as wide as the Earth.",
    "Question: Who wrote the play Romeo and Juliet?\nAnswer: William Shakespeare wrote Romeo and "
    "Juliet near the end of the sixteenth century; it is one of his early tragedies.",
    "Question: What is the chemical formula of water?\nAnswer: The formula of water is H2O: each "
    "molecule has two hydrogen atoms bound to a single oxygen atom.",
    "Question: Translate the French word 'merci' into English.\nAnswer: 'Merci' means 'thank "
    "you' in English. To say 'thank you very much', a French speaker says 'merci beaucoup'.",
    "Question: Continue the sequence: one, two, three, ...\nAnswer: The next number is four, "
    "then five, six, seven, eight, nine and ten, counting up by one each time.",
)


async def _echo(
    client: Any, model: str, text: str, top: int
) -> tuple[list[str], list[TopK | None]]:
    """The text's own tokens and their top-k (teacher-forced), the generated tail cut off.

    The gateway (like OpenAI) wants max_tokens >= 1, so one token is generated after the text;
    it is not part of the text and may differ between targets, so it is dropped: the echoed
    text is `usage.prompt_tokens` long (vLLM), or, without usage, the positions whose
    `text_offset` lies inside the text."""
    resp = await client.completions.create(
        model=model, prompt=text, max_tokens=1, temperature=0, logprobs=top, echo=True
    )
    lp = resp.choices[0].logprobs
    if lp is None or lp.top_logprobs is None or lp.tokens is None:
        raise ValueError(f"{model}: the server returned no logprobs")
    tokens = list(lp.tokens)
    tops = [dict(d) if d else None for d in lp.top_logprobs]
    usage = getattr(resp, "usage", None)
    if usage is not None and usage.prompt_tokens and usage.prompt_tokens <= len(tokens):
        n = usage.prompt_tokens
    elif lp.text_offset:
        n = sum(1 for offset in lp.text_offset if offset < len(text))
    else:
        raise ValueError(f"{model}: cannot tell the echoed text from the generated token")
    if n < 2:
        raise ValueError(
            f"{model}: the server echoed {n} token(s) of the text (does it support echo?)"
        )
    return tokens[:n], tops[:n]


async def collect_echo(
    a: tuple[Any, str], b: tuple[Any, str], texts: Sequence[str], *, top: int = 20
) -> tuple[list[TopK], list[TopK]]:
    """Teacher-forced top-k on both targets over the same texts (every position compared)."""
    all_a: list[TopK] = []
    all_b: list[TopK] = []
    for text in texts:
        (ta, xa), (tb, xb) = await asyncio.gather(
            _echo(a[0], a[1], text, top), _echo(b[0], b[1], text, top)
        )
        if ta != tb:
            raise ValueError("the two targets tokenise the text differently; cannot align")
        for pa, pb in zip(xa, xb, strict=True):
            if pa and pb:
                all_a.append(pa)
                all_b.append(pb)
    return all_a, all_b
