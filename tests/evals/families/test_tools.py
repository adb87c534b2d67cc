import sys
from typing import Any

import orjson
import pytest

from evals.families import tools as family
from evals.item import Item, Reply, items_digest

FUNCTION = {
    "name": "geo.route",
    "description": "Plan a route.",
    "parameters": {
        "type": "dict",
        "properties": {
            "city": {"type": "string"},
            "stops": {"type": "integer"},
            "speed": {"type": "float"},
            "avoid_tolls": {"type": "boolean", "optional": True},
            "waypoints": {"type": "tuple", "items": {"type": "string"}},
            "when": {"type": "integer"},
        },
        "required": ["city", "stops"],
    },
}


def _item(calls: list[dict[str, Any]]) -> Item:
    return Item(
        "t",
        "tools",
        ({"role": "user", "content": "q"},),
        {"calls": calls},
        "bfcl_ast",
        tools=(family.openai_tool(FUNCTION),),
    )


ROUTE = _item(
    [
        {
            "name": "geo_route",
            "arguments": {
                "city": ["New York", "NYC"],
                "stops": [3],
                "speed": [50.0, ""],
                "avoid_tolls": [True, ""],
                "waypoints": [["a, b", "c"], ""],
                "when": ["now", ""],
            },
        }
    ]
)


def _call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}


def _score(item: Item, *calls: dict[str, Any]) -> str:
    return family.score_ast(item, Reply(None, tool_calls=calls)).outcome


def test_schema_conversion_to_openai_tools() -> None:
    tool = family.openai_tool(FUNCTION)["function"]
    props = tool["parameters"]["properties"]
    assert tool["name"] == "geo_route" and tool["parameters"]["type"] == "object"
    assert props["speed"]["type"] == "number" and props["waypoints"]["type"] == "array"
    assert "optional" not in props["avoid_tolls"]


@pytest.mark.parametrize(
    ("arguments", "outcome", "strict"),
    [
        ({"city": "New York", "stops": 3}, "correct", True),
        ({"city": "  new york ", "stops": 3}, "correct", True),
        ({"city": "NYC", "stops": 3, "speed": 50}, "correct", True),  # int accepted for float
        ({"city": "NYC", "stops": 3, "speed": 50.0, "avoid_tolls": True}, "correct", True),
        ({"city": "NYC", "stops": 3, "waypoints": ["a,b", "C"]}, "correct", True),
        ({"city": "NYC", "stops": 3, "when": "now"}, "correct", True),  # a BFCL "variable"
        ({"city": "NYC", "stops": 3, "waypoints": []}, "correct", True),  # [] reads as left out
        ({"city": "NYC", "stops": 3, "speed": ""}, "wrong", False),  # a str is not a float
        # BFCL deletes spaces and ",./-_*^" before comparing; tools_strict keeps them.
        ({"city": "NYC", "stops": 3, "waypoints": ["ab", "c"]}, "correct", False),
        ({"city": "NewYork", "stops": 3}, "correct", False),
        ({"city": "new-york.", "stops": 3}, "correct", False),
        ({"city": "NYC", "stops": 3.0}, "wrong", False),  # float is not an integer
        ({"city": "NYC", "stops": True}, "wrong", False),  # bool is not an integer
        ({"city": "NYC", "stops": "3"}, "wrong", False),  # no string-to-int coercion
        ({"city": "NYC", "stops": 3, "avoid_tolls": 1}, "wrong", False),
        ({"city": "NYC", "stops": 3, "waypoints": ["c", "a, b"]}, "wrong", False),  # order
        ({"city": "Boston", "stops": 3}, "wrong", False),
        ({"city": "NYC", "stops": 4}, "wrong", False),
        ({"city": "NYC"}, "wrong", False),  # missing required
        ({"city": "NYC", "stops": 3, "mode": "car"}, "wrong", False),  # unexpected parameter
        ({"city": "NYC", "stops": 3, "speed": None}, "wrong", False),
    ],
)
def test_headline_is_bfcl_and_tools_strict_keeps_punctuation(
    arguments: dict[str, Any], outcome: str, strict: bool
) -> None:
    verdict = family.score_ast(ROUTE, Reply(None, tool_calls=(_call("geo_route", arguments),)))
    assert (verdict.outcome, verdict.parts) == (outcome, {"tools_strict": strict})


def test_floats_in_an_integer_array_are_refused() -> None:
    function = {
        "name": "stats.mean",
        "parameters": {
            "type": "dict",
            "properties": {"values": {"type": "array", "items": {"type": "integer"}}},
            "required": ["values"],
        },
    }
    item = Item(
        "m",
        "tools",
        ({"role": "user", "content": "q"},),
        {"calls": [{"name": "stats_mean", "arguments": {"values": [[1, 2, 3]]}}]},
        "bfcl_ast",
        tools=(family.openai_tool(function),),
    )
    assert _score(item, _call("stats_mean", {"values": [1, 2, 3]})) == "correct"
    assert _score(item, _call("stats_mean", {"values": [1.0, 2.0, 3.0]})) == "wrong"


def test_a_missing_parameter_that_is_not_optional_is_wrong() -> None:
    item = _item(
        [{"name": "geo_route", "arguments": {"city": ["x"], "stops": [1], "speed": [2.0]}}]
    )
    assert _score(item, _call("geo_route", {"city": "x", "stops": 1})) == "wrong"
    assert _score(item, _call("geo_route", {"city": "x", "stops": 1, "speed": 2})) == "correct"


def test_bfcl_reads_3_comma_5_as_35_and_tools_strict_does_not() -> None:
    item = _item([{"name": "geo_route", "arguments": {"city": ["35"], "stops": [1]}}])
    for near in ("3, 5", "3.5", "3-5", "3 5"):
        verdict = family.score_ast(
            item, Reply(None, tool_calls=(_call("geo_route", {"city": near, "stops": 1}),))
        )
        assert verdict.correct and not verdict.parts["tools_strict"], near
    assert _score(item, _call("geo_route", {"city": "3 or 5", "stops": 1})) == "wrong"


@pytest.mark.parametrize(
    "call",
    [
        _call("geo_route", '{"city": "NYC", "stops": 3'),
        _call("geo_route", "[1, 2]"),
        _call("geo_route", "not json"),
        _call("geo.route", {"city": "NYC", "stops": 3}),
        _call("delete_everything", {}),
    ],
)
def test_unreadable_calls_are_malformed(call: dict[str, Any]) -> None:
    assert _score(ROUTE, call) == "malformed"


def test_parallel_calls_match_in_any_order_and_count_must_agree() -> None:
    item = _item(
        [
            {"name": "geo_route", "arguments": {"city": ["A"], "stops": [1]}},
            {"name": "geo_route", "arguments": {"city": ["B"], "stops": [2]}},
        ]
    )
    a, b = (
        _call("geo_route", {"city": "A", "stops": 1}),
        _call("geo_route", {"city": "B", "stops": 2}),
    )
    assert family.bfcl_category(item) == "parallel"
    assert _score(item, b, a) == "correct"
    assert _score(item, a) == "wrong"
    assert _score(item, a, a) == "wrong"
    assert _score(item, a, b, b) == "wrong"
    assert _score(item) == "wrong"
    detail = family.score_ast(item, Reply("I would call geo_route twice.")).detail
    assert detail.startswith("no tool call (") and "Wrong number of functions" in detail


def test_irrelevance_follows_bfcl_and_tools_strict_refuses_any_attempt() -> None:
    item = _item([])

    def verdict(*calls: dict[str, Any]) -> tuple[str, bool]:
        v = family.score_ast(item, Reply(None, tool_calls=calls))
        return v.outcome, v.parts["tools_strict"]

    assert verdict() == ("correct", True)
    assert verdict(_call("geo_route", {"city": "NYC", "stops": 3}))[0] == "wrong"
    # BFCL: a call that does not decode is no call, so the irrelevance item is passed.
    assert verdict(_call("geo_route", '{"city": ')) == ("correct", False)
    assert verdict(_call("geo_route", "[1]")) == ("correct", False)


def test_offered_tools_read_back_as_the_bfcl_descriptions() -> None:
    """What the checker is given is what BFCL would read, for every function of the sets."""
    for category in family.CATEGORIES:
        for entry, _truth in family.entries(category):
            for function in entry["function"]:
                back = family.bfcl_function(family.openai_tool(function))
                assert back["name"] == function["name"].replace(".", "_")
                assert _read_fields(back["parameters"]) == _read_fields(function["parameters"])


def _read_fields(schema: dict[str, Any]) -> Any:
    """The schema as BFCL's checker reads it: types (tuple as array), items, properties,
    required."""
    kind = schema.get("type")
    return {
        "type": "array" if kind == "tuple" else kind,
        "items": _read_fields(schema["items"]) if "items" in schema else None,
        "properties": {k: _read_fields(v) for k, v in schema.get("properties", {}).items()},
        "required": schema.get("required"),
    }


def test_the_checker_is_imported_without_leaving_a_stand_in() -> None:
    family.score_ast(ROUTE, Reply(None))
    assert "bfcl_eval.constants.model_config" not in sys.modules
    assert not hasattr(sys.modules["bfcl_eval.constants"], "model_config")


def _concrete(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _concrete(_first(v)) for k, v in value.items() if _first(v) != ""}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def _first(options: list[Any]) -> Any:
    return next((o for o in options if o != ""), "")


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return family.build(0)


def test_default_suite_is_stratified_and_pinned(items: list[Item]) -> None:
    assert len(items) == family.DEFAULT_N
    counts = {c: sum(i.meta["category"] == c for i in items) for c in family.CATEGORIES}
    assert counts == {
        "simple": 20,
        "multiple": 15,
        "parallel": 15,
        "parallel_multiple": 10,
        "irrelevance": 20,
    }
    assert items_digest(items) == items_digest(family.build(0))
    names = {t["function"]["name"] for i in items for t in i.tools or ()}
    assert all(family.UNSAFE_NAME.search(n) is None for n in names)


def test_every_item_accepts_its_own_ground_truth_in_reverse_order(items: list[Item]) -> None:
    for item in items:
        calls = [
            _call(c["name"], _concrete({k: v for k, v in c["arguments"].items()}))
            for c in item.answer["calls"]
        ]
        verdict = family.score_ast(item, Reply(None, tool_calls=tuple(reversed(calls))))
        assert verdict.correct, (item.id, verdict.detail)
