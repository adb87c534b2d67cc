"""BFCL's own verdicts: `bfcl_eval`'s AST checker and relevance rule, loaded without its heavy deps.

The tools family's headline is what the Berkeley Function-Calling Leaderboard's code says about
an answer, so that a score here reads against the leaderboard. The checker is the installed
`bfcl_eval.eval_checker.ast_eval.ast_checker`, run unmodified; the irrelevance rule is the one
of `bfcl_eval.eval_checker.eval_runner` (correct when no function call can be decoded), built
from `bfcl_eval.utils.is_empty_output` and `is_function_calling_format_output`.

Why the import is careful: `ast_checker` imports `bfcl_eval.constants.model_config` at module
level for one lookup, `MODEL_CONFIG_MAPPING[model].underscore_to_dot` (whether a model saw
`math.factorial` as `math_factorial`), and that module imports every provider's SDK (tree-sitter,
mistralai, cohere, google-genai, qwen-agent...). `bfcl-eval` is installed with `--no-deps`
(deploy/install.sh), so while the checker is imported that one module is given as a light one
holding the single entry this suite needs: the model under test is `plumbline`, which is offered
OpenAI function tools with dots replaced by underscores (`underscore_to_dot=True`, as for
BFCL's OpenAI, Mistral and Gemini handlers). The stand-in is removed from `sys.modules` right
after, so nothing else ever sees it. In practice the tools family passes names that are already
converted, so the checker never needs the lookup at all.

Decoding is BFCL's for function-calling models (`OpenAICompletionsHandler.decode_ast`): each
call becomes `{name: json.loads(arguments)}`; a call that does not decode fails an AST item and
counts as "no call" on an irrelevance item.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from types import ModuleType, SimpleNamespace
from typing import Any

MODEL = "plumbline"
_CONFIG_MODULE = "bfcl_eval.constants.model_config"


@dataclass(frozen=True, slots=True)
class Checked:
    """BFCL's verdict on one answer: valid or not, and BFCL's own error text and type."""

    valid: bool
    error: str = ""
    error_type: str = ""


@dataclass(frozen=True, slots=True)
class Reference:
    ast_checker: Any
    language: Any
    is_empty_output: Any
    is_function_calling_format_output: Any


@cache
def reference_functions() -> Reference:
    stand_in = None
    if _CONFIG_MODULE not in sys.modules:
        stand_in = ModuleType(_CONFIG_MODULE)
        stand_in.MODEL_CONFIG_MAPPING = {MODEL: SimpleNamespace(underscore_to_dot=True)}  # type: ignore[attr-defined]
        sys.modules[_CONFIG_MODULE] = stand_in
    try:
        checker = import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    finally:
        if stand_in is not None and sys.modules.get(_CONFIG_MODULE) is stand_in:
            del sys.modules[_CONFIG_MODULE]
            constants = sys.modules.get("bfcl_eval.constants")
            if getattr(constants, "model_config", None) is stand_in:
                delattr(constants, "model_config")
    enums = import_module("bfcl_eval.constants.enums")
    utils = import_module("bfcl_eval.utils")
    return Reference(
        checker.ast_checker,
        enums.Language.PYTHON,
        utils.is_empty_output,
        utils.is_function_calling_format_output,
    )


class Undecodable(ValueError):
    """A call that BFCL's function-calling decoder cannot read."""


def decode(calls: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's FC decoding of (name, raw arguments) pairs: `[{name: json.loads(arguments)}]`."""
    decoded = []
    for name, arguments in calls:
        try:
            params = json.loads(arguments) if isinstance(arguments, str | bytes) else arguments
        except ValueError as exc:
            raise Undecodable(f"{name}: arguments are not JSON ({exc})") from None
        decoded.append({name: params})
    return decoded


def check_ast(
    functions: list[dict[str, Any]],
    calls: list[tuple[str, Any]],
    ground_truth: list[dict[str, Any]],
    category: str,
) -> Checked:
    """BFCL's verdict on an AST item (simple, multiple, parallel, parallel_multiple).

    `functions` are BFCL function descriptions, `ground_truth` BFCL's possible answers
    (`[{name: {param: [allowed values]}}]`), `category` BFCL's test category name.
    """
    ref = reference_functions()
    try:
        output = decode(calls)
    except Undecodable as exc:
        return Checked(False, f"Invalid syntax. Failed to decode AST. {exc}", "decoder_failed")
    if not ref.is_function_calling_format_output(output):
        return Checked(False, "Did not output in the specified format.", "wrong_output_format")
    result = ref.ast_checker(functions, output, ground_truth, ref.language, category, MODEL)
    if result["valid"]:
        return Checked(True)
    errors = "; ".join(map(str, result.get("error") or []))
    return Checked(False, errors, result.get("error_type", ""))


def check_irrelevance(calls: list[tuple[str, Any]]) -> Checked:
    """BFCL's irrelevance verdict: valid when the output decodes to no function call."""
    ref = reference_functions()
    try:
        output = decode(calls)
    except Undecodable:
        return Checked(True)
    if ref.is_empty_output(output):
        return Checked(True)
    return Checked(
        False,
        "Valid syntax. Successfully decode AST when it should not.",
        "irrelevance_error:decoder_success",
    )
