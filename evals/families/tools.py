"""Tool calling: the Berkeley Function-Calling Leaderboard's answer sets, matched call by call.

What it measures: whether the model calls the right function with the right arguments — or,
for irrelevance items, correctly calls nothing when no offered tool fits.

Where the items come from: the data files shipped inside the `bfcl-eval` wheel (Apache-2.0),
pinned by sha256: `data/BFCL_v4_<category>.json` and `data/possible_answer/...` (JSON lines).
Categories: simple (simple_python), multiple, parallel, parallel_multiple and irrelevance,
sampled per category with the seed. Only the data is used; no `bfcl_eval` code is imported.

Tools are converted to OpenAI function tools: BFCL's `dict` -> `object`, `float` -> `number`,
`tuple` -> `array`, `any` -> untyped; dotted names such as `math.factorial` -> `math_factorial`
(OpenAI names must match `^[a-zA-Z0-9_-]{1,64}$`).

Scorer `bfcl_ast` — BFCL's AST matching rules, read from the converted schema:
- exactly as many calls as the ground truth has; parallel calls match in any order;
- each call names the expected function; every required parameter is present; every given
  parameter is in the schema and in the answer set; a parameter absent from the call must list
  "" (optional) among its allowed values;
- types: integer is an int (not a bool, not 5.0); number accepts an int; boolean is a bool;
  array a list; object a dict. When the allowed values are strings for a non-string parameter
  (a "variable" in BFCL), a string is accepted;
- values: one of the allowed values (null only where the answer set lists it); lists
  element-wise and in order; dicts key by key.
  Strings compare case-insensitively, with surrounding whitespace and whitespace next to
  punctuation ignored. Deliberately stricter than BFCL, which deletes spaces and ",./-_*^"
  so that "3, 5", "3.5" and "35" compare equal.
- irrelevance: correct only when no call is made.
Outcomes: a call whose arguments are not a JSON object, or which names a tool that was not
offered, is `malformed` (reported apart from wrong); no call where one was due is `wrong`.
"""

from __future__ import annotations

import hashlib
import random
import re
from importlib.resources import files
from typing import Any

import orjson

from evals.item import Item, Reply, Verdict

NAME = "tools"
DEFAULT_N = 80

# category -> (file stem, share of the default suite)
CATEGORIES: dict[str, tuple[str, float]] = {
    "simple": ("simple_python", 0.25),
    "multiple": ("multiple", 0.1875),
    "parallel": ("parallel", 0.1875),
    "parallel_multiple": ("parallel_multiple", 0.125),
    "irrelevance": ("irrelevance", 0.25),
}
SHA256 = {
    "BFCL_v4_simple_python.json": (
        "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991"
    ),
    "BFCL_v4_multiple.json": "aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a",
    "BFCL_v4_parallel.json": "19f51a82eff42e5d62541aa500115a056eb78f437c2ba1f10415fd7c8e5dda84",
    "BFCL_v4_parallel_multiple.json": (
        "8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579"
    ),
    "BFCL_v4_irrelevance.json": "2b6ed4c2e992cdcf5f1678a701851f944bef7550ee026ed1ddb89efed5be01a6",
    "possible_answer/BFCL_v4_simple_python.json": (
        "90cd5bc653690ee8e459b5b3f3fc9458606f7f3fcbf795bb51b7dc581f8c86dc"
    ),
    "possible_answer/BFCL_v4_multiple.json": (
        "244e00ce9395df948bcafc7bee64e8f9c87ef70887587d83cae45b13699f3047"
    ),
    "possible_answer/BFCL_v4_parallel.json": (
        "8a6aa19c1adddc6a5a2f7e40f9dbf30cc7e95815e7b830c90589ab318229e0f0"
    ),
    "possible_answer/BFCL_v4_parallel_multiple.json": (
        "5ebf24f458c1f16300c05505d83d6f0a1b68b79be273a033febd0d4f840507e3"
    ),
}

SYSTEM = (
    "You can call the functions provided. When the request can be served by them, call them "
    "with the right arguments (several calls at once when needed). When none of them fits, do "
    "not call any; answer in text instead."
)

TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
}
UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_-]")
SPACE_BY_PUNCT = re.compile(r"\s*([^\w\s])\s*")
SPACES = re.compile(r"\s+")


# ----------------------------------------------------------------------------- loading


def _read(relative: str) -> list[dict[str, Any]]:
    data = files("bfcl_eval").joinpath(f"data/{relative}").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[relative]:
        raise ValueError(f"bfcl_eval data/{relative}: sha256 {digest} does not match the pin")
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def tool_name(name: str) -> str:
    return UNSAFE_NAME.sub("_", name)[:64]


def openai_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as JSON Schema (recursively); drops BFCL's `optional` flag."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if value in TYPES:
                out["type"] = TYPES[value]
        elif key == "properties":
            out["properties"] = {k: openai_schema(v) for k, v in value.items()}
        elif key == "items":
            out["items"] = openai_schema(value)
        elif key != "optional":
            out[key] = value
    return out


def openai_tool(function: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool_name(function["name"]),
            "description": function.get("description", ""),
            "parameters": openai_schema(function["parameters"]),
        },
    }


def _item(category: str, entry: dict[str, Any], truth: list[dict[str, Any]] | None) -> Item:
    messages = ({"role": "system", "content": SYSTEM}, *entry["question"][0])
    calls = [
        {"name": tool_name(name), "arguments": args}
        for call in truth or []
        for name, args in call.items()
    ]
    return Item(
        id=f"tools-{entry['id']}",
        family=NAME,
        messages=tuple(messages),
        answer={"calls": calls},
        scorer="bfcl_ast",
        tools=tuple(openai_tool(f) for f in entry["function"]),
        meta={"source": "bfcl-eval", "category": category, "bfcl_id": entry["id"]},
    )


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` items stratified over the categories by their shares, sampled with the seed."""
    rng = random.Random(f"tools:{seed}")
    items: list[Item] = []
    remaining = n
    for index, (category, (stem, share)) in enumerate(CATEGORIES.items()):
        count = remaining if index == len(CATEGORIES) - 1 else min(remaining, round(n * share))
        remaining -= count
        entries = _read(f"BFCL_v4_{stem}.json")
        answers = (
            None
            if category == "irrelevance"
            else {a["id"]: a["ground_truth"] for a in _read(f"possible_answer/BFCL_v4_{stem}.json")}
        )
        for i in sorted(rng.sample(range(len(entries)), count)):
            entry = entries[i]
            items.append(_item(category, entry, answers[entry["id"]] if answers else None))
    return items


# ----------------------------------------------------------------------------- scoring


class Malformed(ValueError):
    """A tool call that cannot be read: arguments not a JSON object, or an unoffered tool."""


def parse_calls(item: Item, reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """The reply's tool calls as (name, arguments); raises Malformed."""
    offered = {t["function"]["name"] for t in item.tools or ()}
    calls = []
    for raw in reply.tool_calls:
        function = raw.get("function", raw)
        name, arguments = function.get("name"), function.get("arguments")
        if name not in offered:
            raise Malformed(f"call to a tool that was not offered: {name!r}")
        if isinstance(arguments, str | bytes):
            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise Malformed(f"{name}: arguments are not JSON ({exc})") from None
        if not isinstance(arguments, dict):
            raise Malformed(f"{name}: arguments are not a JSON object")
        calls.append((name, arguments))
    return calls


def score_ast(item: Item, reply: Reply) -> Verdict:
    try:
        calls = parse_calls(item, reply)
    except Malformed as exc:
        return Verdict("malformed", str(exc))
    expected = item.answer["calls"]
    if not expected:
        if calls:
            return Verdict("wrong", f"called {calls[0][0]} on an irrelevant request", calls)
        return Verdict("correct", "no call", calls)
    if not calls:
        return Verdict("wrong", "no tool call", calls)
    if len(calls) != len(expected):
        return Verdict("wrong", f"{len(calls)} calls, expected {len(expected)}", calls)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in item.tools or ()}
    error = match_error(expected, calls, schemas)
    return Verdict("wrong", error, calls) if error else Verdict("correct", "", calls)


def match_error(
    expected: list[dict[str, Any]], calls: list[tuple[str, dict[str, Any]]], schemas: dict[str, Any]
) -> str | None:
    """None when the calls can be paired one-to-one with the expected calls (any order)."""
    errors: list[str] = []

    def pair(i: int, free: frozenset[int]) -> bool:
        if i == len(expected):
            return True
        for j in sorted(free):
            error = call_error(expected[i], calls[j], schemas)
            if error is None and pair(i + 1, free - {j}):
                return True
            if error:
                errors.append(error)
        return False

    return None if pair(0, frozenset(range(len(calls)))) else (errors or ["no pairing"])[0]


def call_error(
    want: dict[str, Any], got: tuple[str, dict[str, Any]], schemas: dict[str, Any]
) -> str | None:
    """Why a call does not match one expected call, or None when it matches."""
    name, args = got
    if name != want["name"]:
        return f"called {name}, expected {want['name']}"
    schema = schemas[name]
    properties = schema.get("properties", {})
    allowed: dict[str, list[Any]] = want["arguments"]
    for param in schema.get("required", []):
        if param not in args:
            return f"{name}: missing required {param!r}"
    for param, value in args.items():
        if param not in properties or param not in allowed:
            return f"{name}: unexpected parameter {param!r}"
        error = value_error(value, properties[param], allowed[param])
        if error:
            return f"{name}.{param}: {error}"
    for param, options in allowed.items():
        if param not in args and "" not in options:
            return f"{name}: missing {param!r}, which is not optional"
    return None


def value_error(value: Any, schema: dict[str, Any], options: list[Any]) -> str | None:
    """Type check with BFCL's coercions, then match one allowed value."""
    kind = schema.get("type")
    concrete = [o for o in options if o != ""]
    if value is None:
        return None if None in concrete else "null is not an allowed value"
    is_variable = kind not in (None, "string") and any(isinstance(o, str) for o in concrete)
    if is_variable and isinstance(value, str):
        kind = "string"
    elif not _has_type(value, kind):
        return f"type {type(value).__name__} is not {kind}"
    if kind == "number" and type(value) is int:
        value = float(value)
    if any(_same(value, option) for option in concrete):
        return None
    return f"{value!r} is not one of {concrete!r}"


def _has_type(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if kind == "number":
        return type(value) in (int, float)
    python = {"integer": int, "string": str, "boolean": bool, "array": list, "object": dict}
    return type(value) is python.get(kind, object)


def _same(value: Any, option: Any) -> bool:
    if isinstance(value, str) and isinstance(option, str):
        return _normal(value) == _normal(option)
    if isinstance(value, list) and isinstance(option, list):
        return len(value) == len(option) and all(map(_same, value, option))
    if isinstance(value, dict) and isinstance(option, dict):
        return _dict_matches(value, option)
    if isinstance(value, bool) or isinstance(option, bool):
        return value is option
    return type(value) in (int, float) and type(option) in (int, float) and value == option


def _dict_matches(value: dict[str, Any], option: dict[str, Any]) -> bool:
    """A dict argument: BFCL lists allowed values per key, with "" marking an optional key."""
    for key, got in value.items():
        if key not in option:
            return False
        allowed = option[key] if isinstance(option[key], list) else [option[key]]
        if not any(_same(got, a) for a in allowed if a != ""):
            return False
    return all(
        key in value or (isinstance(allowed, list) and "" in allowed)
        for key, allowed in option.items()
    )


def _normal(text: str) -> str:
    return SPACES.sub(" ", SPACE_BY_PUNCT.sub(r"\1", text.strip())).casefold().replace("'", '"')


SCORERS = {"bfcl_ast": score_ast}
