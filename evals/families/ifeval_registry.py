"""IFEval's reference instruction registry, from lm-eval, loaded offline and without its heavy deps.

The instruction-following family is scored by `lm_eval.tasks.ifeval` (lm-evaluation-harness's
copy of Google's IFEval checkers): its `INSTRUCTION_DICT`, its `INSTRUCTION_CONFLICTS` and its
`test_instruction_following_strict` / `_loose`, run unmodified. Its own dependencies are small
(`nltk`, `langdetect`, `immutabledict`, installed as the `evals` extra); lm-eval itself is
installed with `--no-deps` (deploy/install.sh) because its task manager pulls `datasets`,
`evaluate`, `scikit-learn` and more, none of which the checkers use.

Three things are done with care, all while the modules are imported and undone after:
- `lm_eval/__init__.py` and `lm_eval/tasks/__init__.py` are not executed (the second imports the
  task manager, hence `datasets`): while `lm_eval.tasks.ifeval.*` is imported, the two package
  modules are bare packages over the installed directories, removed from `sys.modules` after.
- No download at run time: `instructions_util` calls `nltk.download("punkt_tab")` at import when
  the tokenizer data is missing. That call is answered with "not downloaded" (what nltk itself
  answers offline) and never reaches the network.
- `langdetect` is made deterministic (`DetectorFactory.seed = 0`, langdetect's documented way);
  unseeded, the same short text can be detected differently from one call to the next.

Two of IFEval's 25 instructions need nltk's punkt data, which no package on the index ships and
which this suite never downloads: `length_constraints:number_sentences` and
`change_case:capital_word_frequency`. They are not offered (`OFFLINE`); every other instruction
is, including `language:response_language`.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType
from typing import Any

NEEDS_PUNKT = frozenset(
    {"length_constraints:number_sentences", "change_case:capital_word_frequency"}
)


@dataclass(frozen=True, slots=True)
class Registry:
    instructions: dict[str, Any]  # instruction id -> checker class
    conflicts: dict[str, set[str]]
    input_example: Any
    strict: Any
    loose: Any
    language_names: dict[str, str]  # ISO code -> the name the description uses
    refused_downloads: tuple[str, ...]


@contextmanager
def _bare_packages(names: tuple[str, ...]) -> Iterator[None]:
    """Stand bare packages over the installed directories for `names` while inside."""
    spec = find_spec(names[0])
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{names[0]} is not installed (the evals extra installs it)")
    root = Path(spec.origin).parent
    placed = []
    for name in names:
        if name in sys.modules:
            continue
        module = ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = module
        placed.append((name, module))
    try:
        yield
    finally:
        for name, module in placed:
            if sys.modules.get(name) is module:
                del sys.modules[name]


@contextmanager
def _no_downloads(refused: list[str]) -> Iterator[None]:
    import nltk

    original = nltk.download

    def refuse(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        refused.append(str(info_or_id))
        return False

    nltk.download = refuse
    try:
        yield
    finally:
        nltk.download = original


@cache
def registry() -> Registry:
    import langdetect

    langdetect.DetectorFactory.seed = 0
    # The reference logs an error, with the whole answer, for every text langdetect finds no
    # letters in (and counts the instruction followed, as IFEval does): the verdict stays, the
    # answer text stays out of the logs.
    logging.getLogger("lm_eval.tasks.ifeval.instructions").setLevel(logging.CRITICAL)
    refused: list[str] = []
    # The reference prints "Downloaded punkt_tab" after asking, whatever the answer: not shown.
    with (
        _bare_packages(("lm_eval", "lm_eval.tasks")),
        _no_downloads(refused),
        redirect_stdout(io.StringIO()),
    ):
        registry_module = import_module("lm_eval.tasks.ifeval.instructions_registry")
        utils = import_module("lm_eval.tasks.ifeval.utils")
        util = import_module("lm_eval.tasks.ifeval.instructions_util")
    return Registry(
        instructions=dict(registry_module.INSTRUCTION_DICT),
        conflicts={k: set(v) for k, v in registry_module.INSTRUCTION_CONFLICTS.items()},
        input_example=utils.InputExample,
        strict=utils.test_instruction_following_strict,
        loose=utils.test_instruction_following_loose,
        language_names=dict(util.LANGUAGE_CODES),
        refused_downloads=tuple(refused),
    )


def offline_ids() -> list[str]:
    """The instruction ids this suite offers: every registered one that runs offline."""
    return sorted(i for i in registry().instructions if i not in NEEDS_PUNKT)


def conflicts(a: str, b: str) -> bool:
    """Whether the reference refuses to combine instructions `a` and `b` (either direction)."""
    table = registry().conflicts
    return a == b or b in table.get(a, ()) or a in table.get(b, ())


def describe(instruction_id: str, kwargs: dict[str, Any]) -> str:
    """The reference's own wording of an instruction with these arguments."""
    checker = registry().instructions[instruction_id](instruction_id)
    return str(checker.build_description(**{k: v for k, v in kwargs.items() if v}))


@dataclass(frozen=True, slots=True)
class Followed:
    strict: list[bool]
    loose: list[bool]


def follows(prompt: str, ids: list[str], kwargs: list[dict[str, Any]], response: str) -> Followed:
    """The reference's strict and loose verdicts, one per instruction."""
    ref = registry()
    example = ref.input_example(key=0, instruction_id_list=ids, prompt=prompt, kwargs=kwargs)
    return Followed(
        list(ref.strict(example, response).follow_instruction_list),
        list(ref.loose(example, response).follow_instruction_list),
    )
