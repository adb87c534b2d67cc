"""Tool calling: the Berkeley Function-Calling Leaderboard's answer sets, matched call by call.

What it measures: whether the model calls the right function with the right arguments — or,
for irrelevance items, correctly calls nothing when no offered tool fits.

Where the items come from: the data files shipped inside the `bfcl-eval` wheel (Apache-2.0),
pinned by sha256: `data/BFCL_v4_<category>.json` and `data/possible_answer/...` (JSON lines).
Categories: simple (simple_python), multiple, parallel, parallel_multiple and irrelevance,
sampled per category with the seed.

Tools are converted to OpenAI function tools: BFCL's `dict` -> `object`, `float` -> `number`,
`tuple` -> `array`, `any` -> untyped; dotted names such as `math.factorial` -> `math_factorial`
(OpenAI names must match `^[a-zA-Z0-9_-]{1,64}$`; BFCL converts the same way for
function-calling models).

Scorer `bfcl_ast` — the outcome is BFCL's own verdict (`evals.families.bfcl_checker`: the
installed `bfcl_eval` AST checker, run unmodified on the offered tools read back as BFCL
descriptions; irrelevance by BFCL's rule, correct when no call decodes), so tools accuracy reads
against the leaderboard's AST categories. BFCL's choices therefore hold in the headline: strings
compare with spaces and ",./-_*^" deleted ("3, 5" = "35"), an explicit "" is accepted for an
optional parameter, integer arrays refuse floats, and an undecodable call on an irrelevance item
counts as no call.
Sub-score `tools_strict` (`Verdict.parts`, `evals.families.tools_strict`): BFCL's verdict and
the suite's stricter rules, punctuation kept in strings and no attempted call at all on an
irrelevance item. It never replaces the headline.
Outcomes: what BFCL refuses is `malformed` when a call cannot be read (arguments not a JSON
object, or a tool that was not offered), else `wrong`, with BFCL's error text as the detail.
"""

from __future__ import annotations

import hashlib
import random
import re
from importlib.resources import files
from typing import Any

import orjson

from evals.families.bfcl_checker import Checked, check_ast, check_irrelevance
from evals.families.tools_strict import strict_error
from evals.item import Item, Reply, Verdict

NAME = "tools"
PARTS = ("tools_strict",)
HEADLINE = (
    "accuracy is bfcl_eval's own AST checker (BFCL's leaderboard verdict: strings compared "
    "without spaces or ,./-_*^); tools_strict is the suite's stricter reading, never the headline"
)
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
BFCL_TYPES = {"object": "dict", "number": "float"}
UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_-]")


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


def item_for(category: str, entry: dict[str, Any], truth: list[dict[str, Any]] | None) -> Item:
    """The item of one BFCL entry (`truth` is its possible answers; None for irrelevance)."""
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


def entries(category: str) -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """Every BFCL entry of a category with its possible answers (None for irrelevance)."""
    stem = CATEGORIES[category][0]
    rows = _read(f"BFCL_v4_{stem}.json")
    if category == "irrelevance":
        return [(entry, None) for entry in rows]
    answers = {a["id"]: a["ground_truth"] for a in _read(f"possible_answer/BFCL_v4_{stem}.json")}
    return [(entry, answers[entry["id"]]) for entry in rows]


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` items stratified over the categories by their shares, sampled with the seed."""
    rng = random.Random(f"tools:{seed}")
    items: list[Item] = []
    remaining = n
    for index, (category, (_stem, share)) in enumerate(CATEGORIES.items()):
        count = remaining if index == len(CATEGORIES) - 1 else min(remaining, round(n * share))
        remaining -= count
        rows = entries(category)
        for i in sorted(rng.sample(range(len(rows)), count)):
            items.append(item_for(category, *rows[i]))
    return items


# ----------------------------------------------------------------------------- scoring


def bfcl_function(tool: dict[str, Any]) -> dict[str, Any]:
    """An offered OpenAI tool as the BFCL function description it was converted from.

    The inverse of `openai_tool` for everything BFCL's checker reads: `object` -> `dict`,
    `number` -> `float`, an untyped schema -> `any`; `array` stays `array` (BFCL's checker treats
    `tuple` and `array` alike), and the name stays the offered one (BFCL's own conversion for
    function-calling models, `.` -> `_`, which is all `tool_name` changes in these answer sets).
    """
    function = tool["function"]
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "parameters": _bfcl_schema(function.get("parameters") or {}),
    }


def _bfcl_schema(schema: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in schema.items() if k not in ("properties", "items")}
    out["type"] = BFCL_TYPES.get(schema.get("type", ""), schema.get("type", "any"))
    if "properties" in schema:
        out["properties"] = {k: _bfcl_schema(v) for k, v in schema["properties"].items()}
    if "items" in schema:
        out["items"] = _bfcl_schema(schema["items"])
    return out


def bfcl_category(item: Item) -> str:
    """BFCL's test category of an item (what selects its checker); inferred for a bare item."""
    category = item.meta.get("category")
    if category in CATEGORIES:
        return CATEGORIES[category][0]
    expected, offered = len(item.answer["calls"]), len(item.tools or ())
    if not expected:
        return "irrelevance"
    if expected > 1:
        return "parallel_multiple" if offered > 1 else "parallel"
    return "multiple" if offered > 1 else "simple_python"


class Malformed(ValueError):
    """A tool call that cannot be read: arguments not a JSON object, or an unoffered tool."""


def raw_calls(reply: Reply) -> list[tuple[str, Any]]:
    """The reply's tool calls as (name, raw arguments), as BFCL's decoder receives them."""
    calls = []
    for raw in reply.tool_calls:
        function = raw.get("function", raw)
        calls.append((function.get("name"), function.get("arguments")))
    return calls


def parse_calls(item: Item, calls: list[tuple[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls with their arguments decoded; raises Malformed."""
    offered = {t["function"]["name"] for t in item.tools or ()}
    parsed = []
    for name, arguments in calls:
        if name not in offered:
            raise Malformed(f"call to a tool that was not offered: {name!r}")
        if isinstance(arguments, str | bytes):
            try:
                arguments = orjson.loads(arguments)
            except orjson.JSONDecodeError as exc:
                raise Malformed(f"{name}: arguments are not JSON ({exc})") from None
        if not isinstance(arguments, dict):
            raise Malformed(f"{name}: arguments are not a JSON object")
        parsed.append((name, arguments))
    return parsed


def score_ast(item: Item, reply: Reply) -> Verdict:
    """BFCL's verdict is the outcome; `tools_strict` adds the suite's stricter rules."""
    calls = raw_calls(reply)
    try:
        parsed: list[tuple[str, dict[str, Any]]] | None = parse_calls(item, calls)
    except Malformed as exc:
        parsed, unreadable = None, str(exc)
    expected = item.answer["calls"]
    checked = _bfcl(item, calls, expected)
    strict = checked.valid and parsed is not None
    if strict and expected:
        strict = strict_error(expected, parsed or []) is None
    elif strict:
        strict = not calls
    parts = {"tools_strict": strict}
    if checked.valid:
        detail = "" if strict else _strict_detail(expected, calls, parsed)
        return Verdict("correct", detail, parsed, parts)
    if parsed is None:
        return Verdict("malformed", unreadable, None, parts)
    detail = checked.error or checked.error_type
    return Verdict("wrong", f"no tool call ({detail})" if not calls else detail, parsed, parts)


def _bfcl(item: Item, calls: list[tuple[str, Any]], expected: list[dict[str, Any]]) -> Checked:
    if not expected:
        return check_irrelevance(calls)
    functions = [bfcl_function(t) for t in item.tools or ()]
    truth = [{c["name"]: c["arguments"]} for c in expected]
    try:
        return check_ast(functions, calls, truth, bfcl_category(item))
    except Exception as exc:  # noqa: BLE001 - BFCL's checker has no verdict for this answer
        return Checked(False, f"bfcl_eval's checker raised {type(exc).__name__}: {exc}", "raised")


def _strict_detail(
    expected: list[dict[str, Any]],
    calls: list[tuple[str, Any]],
    parsed: list[tuple[str, dict[str, Any]]] | None,
) -> str:
    if not expected:
        return f"tools_strict: attempted {len(calls)} call(s) on an irrelevant request"
    if parsed is None:
        return "tools_strict: a call does not parse"
    return f"tools_strict: {strict_error(expected, parsed)}"


SCORERS = {"bfcl_ast": score_ast}
