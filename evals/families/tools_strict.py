"""The tools family's `tools_strict` sub-score: BFCL's verdict plus two stricter rules of ours.

The headline of the tools family is BFCL's own checker (`evals.families.bfcl_checker`). This
module adds what the suite deliberately asks beyond it, reported apart as `tools_strict`, never
as the headline:

- Strings keep their punctuation. BFCL compares strings after deleting spaces and ",./-_*^"
  and lowercasing, so "3, 5", "3.5", "35" and "3-5" are all equal there. Here strings compare
  case-insensitively with surrounding whitespace, runs of whitespace and whitespace next to
  punctuation ignored, and nothing else ("New York, NY" = "new york,ny" but "3.5" != "35").
- On an irrelevance item, any attempted call fails, including one whose arguments do not
  decode (BFCL counts an undecodable call as "no call", hence correct).

An explicit "" or [] for an optional parameter stays accepted (BFCL reads both as "left out").

`strict_error` is only asked when BFCL already accepted the answer, so every other rule (types,
required and optional parameters, counts, order) is BFCL's; the matching below re-pairs calls
with expected calls (parallel answers in any order) and compares values with the strict strings.
"""

from __future__ import annotations

import re
from typing import Any

SPACE_BY_PUNCT = re.compile(r"\s*([^\w\s])\s*")
SPACES = re.compile(r"\s+")


def strict_error(
    expected: list[dict[str, Any]], calls: list[tuple[str, dict[str, Any]]]
) -> str | None:
    """None when the calls pair one-to-one with the expected calls under the strict strings."""
    errors: list[str] = []

    def pair(i: int, free: frozenset[int]) -> bool:
        if i == len(expected):
            return True
        for j in sorted(free):
            error = _call_error(expected[i], calls[j])
            if error is None and pair(i + 1, free - {j}):
                return True
            if error:
                errors.append(error)
        return False

    if len(calls) != len(expected):
        return f"{len(calls)} calls, expected {len(expected)}"
    return None if pair(0, frozenset(range(len(calls)))) else (errors or ["no pairing"])[0]


def _call_error(want: dict[str, Any], got: tuple[str, dict[str, Any]]) -> str | None:
    name, args = got
    if name != want["name"]:
        return f"called {name}, expected {want['name']}"
    allowed: dict[str, list[Any]] = want["arguments"]
    for param, value in args.items():
        options = allowed.get(param, [])
        if value == [] and "" in options:
            continue  # BFCL reads an empty list for an optional list as "left out"
        if not any(_same(value, option) for option in options):
            return f"{name}.{param}: {value!r} is not one of {options!r} (strings kept exact)"
    return None


def _same(value: Any, option: Any) -> bool:
    if isinstance(value, str) and isinstance(option, str):
        return normal(value) == normal(option)
    if isinstance(value, list) and isinstance(option, list):
        return len(value) == len(option) and all(map(_same, value, option))
    if isinstance(value, dict) and isinstance(option, dict):
        return _dict_matches(value, option)
    if isinstance(value, bool) or isinstance(option, bool):
        return value is option
    return bool(value == option)


def _dict_matches(value: dict[str, Any], option: dict[str, Any]) -> bool:
    """A dict argument: BFCL lists allowed values per key, with "" marking an optional key."""
    for key, got in value.items():
        if key not in option:
            return False
        allowed = option[key] if isinstance(option[key], list) else [option[key]]
        if not any(_same(got, a) for a in allowed):
            return False
    return True


def normal(text: str) -> str:
    """The strict reading of a string: case and incidental whitespace ignored, punctuation kept."""
    return SPACES.sub(" ", SPACE_BY_PUNCT.sub(r"\1", text.strip())).casefold().replace("'", '"')
