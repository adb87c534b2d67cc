"""Constructed answers for BFCL entries, and BFCL's verdict on them straight from `bfcl_eval`.

Used by the tests (a sample) and by `bench/scorer_agreement.py` (every entry) to measure how
often the tools family's headline agrees with the benchmark's reference. For each entry:

- the answer set's own correct answers: the first allowed value of each parameter, each other
  allowed value in turn, optional parameters left out or given, parallel calls reversed;
- known tricks: string punctuation and spacing ("New York" -> "NewYork", "new-york", "a, b" ->
  "a,b"), case, an explicit "" for an optional parameter, floats in integer arrays, 5 for 5.0,
  5.0 for 5, "5" for 5;
- near misses: a changed value, a missing required parameter, an unexpected one, a call left
  out or doubled, another offered function, a tool that was not offered, arguments that are
  not JSON or not an object;
- for irrelevance entries: no call, a plain call, an undecodable call, a call to an unknown tool.

`reference` computes BFCL's verdict the way BFCL does for a function-calling model: the
entry's original function descriptions (dotted names, BFCL types), the answers decoded with
`json.loads`, `ast_checker` for the AST categories and the relevance runner's rule for
irrelevance. Nothing here re-implements a verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evals.families import tools
from evals.families.bfcl_checker import MODEL, reference_functions
from evals.item import Item, Reply

Call = tuple[str, str]  # (offered tool name, raw JSON arguments)


@dataclass(frozen=True, slots=True)
class Probe:
    kind: str
    calls: tuple[Call, ...]


def reply(probe: Probe) -> Reply:
    calls = tuple(
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(probe.calls)
    )
    return Reply(None, tool_calls=calls)


def reference(
    category: str, entry: dict[str, Any], truth: list[dict[str, Any]] | None, probe: Probe
) -> bool:
    """BFCL's verdict on a probe (True: BFCL counts it correct)."""
    ref = reference_functions()
    try:
        decoded = [{name: json.loads(args)} for name, args in probe.calls]
    except ValueError:
        return category == "irrelevance"
    if category == "irrelevance":
        return bool(ref.is_empty_output(decoded))
    if not ref.is_function_calling_format_output(decoded):
        return False
    stem = tools.CATEGORIES[category][0]
    try:
        result = ref.ast_checker(entry["function"], decoded, truth, ref.language, stem, MODEL)
    except Exception:  # noqa: BLE001 - BFCL has no verdict; the suite counts it not correct
        return False
    return bool(result["valid"])


def probes(item: Item) -> Iterator[Probe]:
    """Every constructed answer for one item of the tools family."""
    expected = item.answer["calls"]
    names = [t["function"]["name"] for t in item.tools or ()]
    if not expected:
        yield Probe("no call", ())
        yield Probe("a call", ((names[0], "{}"),))
        yield Probe("an undecodable call", ((names[0], '{"x": '),))
        yield Probe("arguments not an object", ((names[0], "[1]"),))
        yield Probe("an unknown tool", (("not_offered", "{}"),))
        return
    base = [_first(call) for call in expected]
    yield Probe("correct", _encode(expected, base))
    if len(base) > 1:
        yield Probe("correct, reversed", tuple(reversed(_encode(expected, base))))
        yield Probe("a call left out", _encode(expected, base)[1:])
        yield Probe("a call doubled", _encode(expected, base) + _encode(expected, base)[:1])
    yield Probe("no call", ())
    for index, call in enumerate(expected):
        for kind, args in _variants(call, base[index]):
            answer = list(base)
            answer[index] = args
            yield Probe(kind, _encode(expected, answer))
        others = [n for n in names if n != call["name"]]
        if others:
            yield Probe("another function", _rename(expected, base, index, others[0]))
        yield Probe("an unknown tool", _rename(expected, base, index, "not_offered"))
        yield Probe("arguments not JSON", _raw(expected, base, index, '{"a": '))
        yield Probe("arguments not an object", _raw(expected, base, index, "[1]"))


def _first(call: dict[str, Any]) -> dict[str, Any]:
    return {
        param: _concrete(options[0])
        for param, options in call["arguments"].items()
        if options and options[0] != ""
    }


def _concrete(value: Any) -> Any:
    """A possible answer's value as a model would send it (nested allowed lists -> first)."""
    if isinstance(value, dict):
        return {
            k: _concrete(v[0] if isinstance(v, list) and v else v)
            for k, v in value.items()
            if not (isinstance(v, list) and v and v[0] == "")
        }
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def _encode(expected: list[dict[str, Any]], answer: list[dict[str, Any]]) -> tuple[Call, ...]:
    return tuple((c["name"], json.dumps(a)) for c, a in zip(expected, answer, strict=True))


def _rename(expected: list[Any], base: list[Any], index: int, name: str) -> tuple[Call, ...]:
    calls = list(_encode(expected, base))
    calls[index] = (name, calls[index][1])
    return tuple(calls)


def _raw(expected: list[Any], base: list[Any], index: int, raw: str) -> tuple[Call, ...]:
    calls = list(_encode(expected, base))
    calls[index] = (calls[index][0], raw)
    return tuple(calls)


def _variants(call: dict[str, Any], args: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for param, options in call["arguments"].items():
        for option in options[1:]:
            if option != "":
                yield "another allowed value", {**args, param: _concrete(option)}
        if "" in options and param in args:
            yield "optional left out", {k: v for k, v in args.items() if k != param}
        if "" in options:
            yield "empty optional string", {**args, param: ""}
        if param in args:
            for kind, value in _value_tricks(args[param]):
                yield kind, {**args, param: value}
            if "" not in options:
                yield "missing parameter", {k: v for k, v in args.items() if k != param}
    yield "unexpected parameter", {**args, "unexpected_extra": 1}


def _value_tricks(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, bool):
        yield "boolean flipped", not value
        yield "boolean as string", str(value).lower()
    elif isinstance(value, int):
        yield "integer as float", float(value)
        yield "integer as string", str(value)
        yield "integer changed", value + 1
    elif isinstance(value, float):
        yield "float changed", value + 1.5
        if value.is_integer():
            yield "float as integer", int(value)
    elif isinstance(value, str):
        yield from _string_tricks(value)
    elif isinstance(value, list) and value:
        if all(type(v) is int for v in value):
            yield "floats in an integer array", [float(v) for v in value]
        if all(isinstance(v, str) for v in value):
            yield "array strings respaced", [_squeeze(v) for v in value]
        yield "array reversed", list(reversed(value))
        yield "array shortened", value[:-1]


def _string_tricks(value: str) -> Iterator[tuple[str, str]]:
    yield "string upper-cased", value.upper()
    yield "string changed", value + " extra"
    if " " in value:
        yield "string spaces removed", value.replace(" ", "")
        yield "string spaces as hyphens", value.replace(" ", "-")
    if any(p in value for p in ",./-_"):
        yield "string punctuation removed", "".join(c for c in value if c not in ",./-_")
        yield "string respaced around punctuation", _squeeze(value)
    yield "string with a trailing period", value + "."


def _squeeze(value: str) -> str:
    return (
        value.replace(", ", ",").replace(" ,", ",") if ", " in value else value.replace(",", ", ")
    )
