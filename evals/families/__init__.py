"""The family registry: every eval family's builder, and one scorer dispatch by name.

A family module exposes three things:

    NAME      the family's name, as items carry it in `Item.family`
    build     build(seed: int, n: int, **opts) -> list[Item], deterministic in `seed`
    SCORERS   {scorer name: score(item, reply) -> Verdict}; names are unique across families
    PARTS     (optional) the sub-scores its verdicts carry in `Verdict.parts`; the report counts
              every item of the family in each one's denominator, an item that could not show
              it (truncated, timed out, errored, unparsed) as failing it
    HEADLINE  (optional) whose verdict the family's accuracy is, where a benchmark's own
              reference decides it; the report prints it beside the accuracy table

Items carry their scorer as a string so a stored item can be re-scored later without the
builder. `score` applies the rules every family shares before dispatching:

    repetition collapse      -> degenerate (checked first: a loop that hits the cap is a loop)
    finish_reason "length"   -> truncated (a cut-off answer may itself be cut short)
    anything else            -> the item's own scorer

Adding a family is one line in `_MODULES`. The registry is loaded on first use (importing one
family module does not import the others).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any

from evals.item import Item, Reply, Verdict
from gateway.serving.degeneration import reply_degeneration

Builder = Callable[..., list[Item]]
Scorer = Callable[[Item, Reply], Verdict]

_MODULES: tuple[str, ...] = (
    "evals.families.math",
    "evals.families.code",
    "evals.families.tools",
    "evals.families.longctx",
    "evals.families.knowledge",
    "evals.families.ifeval",
    "evals.families.editformat",
)


@cache
def _load() -> tuple[
    dict[str, Builder], dict[str, Scorer], dict[str, tuple[str, ...]], dict[str, str]
]:
    families: dict[str, Builder] = {}
    scorers: dict[str, Scorer] = {}
    parts: dict[str, tuple[str, ...]] = {}
    headlines: dict[str, str] = {}
    for path in _MODULES:
        module: ModuleType = import_module(path)
        families[module.NAME] = module.build
        parts[module.NAME] = tuple(getattr(module, "PARTS", ()))
        headlines[module.NAME] = getattr(module, "HEADLINE", "")
        for name, scorer in module.SCORERS.items():
            if name in scorers:
                raise ValueError(f"scorer {name!r} is defined twice ({path})")
            scorers[name] = scorer
    return families, scorers, parts, headlines


def default_size(family: str) -> int:
    """A family's full size: its builder's default `n` (the default suite asks that many)."""
    return int(inspect.signature(_load()[0][family]).parameters["n"].default)


def parts_of(family: str) -> tuple[str, ...]:
    """The sub-scores a family declares (none for a family this registry does not know)."""
    return _load()[2].get(family, ())


def headline_of(family: str) -> str:
    """Whose verdict a family's accuracy is ("" where the suite's own scorer decides)."""
    return _load()[3].get(family, "")


def __getattr__(name: str) -> Any:
    """`FAMILIES` (name -> builder) and `SCORERS` (name -> scorer), loaded on first access."""
    if name == "FAMILIES":
        return _load()[0]
    if name == "SCORERS":
        return _load()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(name: str, seed: int, n: int | None = None, **opts: Any) -> list[Item]:
    """Build `n` items of family `name` (the family's default size when `n` is None)."""
    builder = _load()[0][name]
    return builder(seed, n, **opts) if n is not None else builder(seed, **opts)


def score(item: Item, reply: Reply) -> Verdict:
    """Score one reply to one item with the item's named scorer.

    Collapse is checked first: a model looping until the cap is degenerate, not merely truncated.
    """
    collapse = reply_degeneration(reply.content, reply.reasoning)
    if collapse is not None:
        return Verdict("degenerate", str(collapse))
    if reply.finish_reason == "length":
        return Verdict("truncated", "finish_reason=length")
    try:
        scorer = _load()[1][item.scorer]
    except KeyError:
        raise KeyError(f"unknown scorer {item.scorer!r}; known: {sorted(_load()[1])}") from None
    return scorer(item, reply)
