"""Why two arms are or are not at parity, in words that name fields.

Two arms are at parity when the gateway asked their upstreams the same thing: their params hashes
(made over the request's meaning, gateway/serving/semantics.py) are equal. When they are not,
the results say why: what an upstream could not be told (`ItemResult.unsent`: "api-b cannot be
sent top_k=20 (kind openai)") or, where both were told everything, what each was asked
(`ItemResult.semantics`). Differences a route accepts (`accept_unequal`) do not break parity but
are carried (`ItemResult.accepted`) and shown beside the numbers they affect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from evals.result import ItemResult


def _split(texts: Iterable[str]) -> list[str]:
    """Each "; "-joined part once, in the order the gateway said them."""
    out: list[str] = []
    for text in texts:
        for part in text.split("; "):
            if part and part not in out:
                out.append(part)
    return out


def unsent(results: Iterable[ItemResult]) -> list[str]:
    """What the arm's upstream could not be told, each once."""
    return _split(r.unsent for r in results)


def accepted(results: Iterable[ItemResult]) -> list[str]:
    """The differences the arm's route accepts, each once."""
    return _split(r.accepted for r in results)


def accepted_text(results: Iterable[ItemResult]) -> str:
    """`accepted` as one line ("" when none), for a table cell beside the arm's numbers."""
    named = accepted(results)
    return f"accepted unequal: {'; '.join(named)}" if named else ""


def _asked(results: Iterable[ItemResult]) -> dict[str, str]:
    """The meaning the arm was asked (the first result that says), field by field."""
    for r in results:
        if r.semantics:
            pairs = (part.partition("=") for part in r.semantics.split(", "))
            return {k: v for k, _, v in pairs}
    return {}


def why_unequal(
    label: str, results: Sequence[ItemResult], other: str, others: Sequence[ItemResult]
) -> str:
    """Why `label`'s arm is not at parity with `other`'s, naming field, value and upstream."""
    named = unsent(results) + [t for t in unsent(others) if t not in unsent(results)]
    if named:
        return "; ".join(named)
    mine, theirs = _asked(results), _asked(others)
    if mine or theirs:
        diffs = [
            f"{k}={mine.get(k, 'unset')} against {k}={theirs.get(k, 'unset')}"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)
        ]
        if diffs:
            return f"{label} was asked otherwise than {other}: {', '.join(diffs)}"
    hashes = sorted({r.params_hash for r in results})
    theirs_h = sorted({r.params_hash for r in others})
    # Results kept before the gateway said what it asked: only the hashes are known.
    return f"{label} was asked otherwise than {other} (params hash {hashes} against {theirs_h})"
