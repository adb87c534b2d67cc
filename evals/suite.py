"""The suites: which families, how many items of each, and the items a run asks.

default   every family at its full size
smoke     a few items of each family: what CI can afford on 2 CPU cores
none      only the user's `--dataset` files
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evals import dataset, families
from evals.item import Item

# Items per family. "default" is the full suite; "smoke" is what CI can afford on 2 CPU cores.
SUITES: dict[str, dict[str, int | None]] = {
    "none": {},  # only --dataset files
    "default": {
        name: None
        for name in ("math", "code", "tools", "longctx", "knowledge", "ifeval", "editformat")
    },
    "smoke": {
        "math": 3,
        "code": 2,
        "tools": 3,
        "longctx": 2,
        "knowledge": 3,
        "ifeval": 3,
        "editformat": 2,
    },
}


def _check_reasoning_gym(suite: str, math_items: int | None, reasoning_gym: int) -> None:
    """The reasoning-gym slice is taken from the suite's math items, with its own package."""
    from evals.families import math as math_family

    math_items = math_family.DEFAULT_N if math_items is None else math_items
    if reasoning_gym > math_items:
        raise ValueError(
            f"--reasoning-gym {reasoning_gym}: the {suite!r} suite has {math_items} math "
            "items, and the reasoning-gym slice is taken from them"
        )
    if importlib.util.find_spec("reasoning_gym") is None:
        raise ValueError(
            "--reasoning-gym needs the reasoning-gym package: pip install reasoning-gym"
        )


def build_items(
    suite: str,
    seed: int,
    window: int | None,
    token_counter: Callable[[str], int] | None = None,
    sizes: dict[str, int | None] | None = None,
    datasets: Sequence[tuple[Path, str]] = (),
    reasoning_gym: int = 0,
) -> list[Item]:
    """The suite's generated families, then each user dataset (path, declared scorer).
    `reasoning_gym`: that many of the math family's items from reasoning-gym's generators."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    spec = dict(SUITES[suite])
    spec.update(sizes or {})
    if reasoning_gym:
        _check_reasoning_gym(suite, spec.get("math", 0), reasoning_gym)
    opts: dict[str, Any] = {}
    if window:
        opts["window"] = window
    if token_counter is not None:
        opts["count_tokens"] = token_counter
    items: list[Item] = []
    for name, n in spec.items():
        if n == 0:
            continue
        gym = {"reasoning_gym": reasoning_gym} if name == "math" and reasoning_gym else {}
        items.extend(families.build(name, seed, n, **opts, **gym))
    for path, scorer in datasets:
        items.extend(dataset.load(path, scorer))
    if not items:
        raise ValueError("nothing to evaluate: the suite is empty and no --dataset was given")
    return items
