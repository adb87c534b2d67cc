"""The task-shape classifier is pure: a request body and a few numbers in, one shape out."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.serving.adapt import prompt_bounds
from gateway.serving.shape import SHAPES, classify

HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def chat(**extra: Any) -> dict[str, Any]:
    return {"messages": HI, **extra}


@pytest.mark.parametrize(
    ("body", "shape"),
    [
        (chat(), "default"),
        (chat(tools=[TOOL]), "tools"),
        (chat(tools=[], tool_choice="required"), "tools"),
        (chat(tool_choice="none"), "default"),
        (chat(tools=[]), "default"),
        (chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), "structured"),
        (chat(response_format={"type": "json_object"}), "structured"),
        (chat(response_format={"type": "text"}), "default"),
        (chat(guided_json={"type": "object"}), "structured"),
        (chat(reasoning_effort="high"), "reasoning"),
        (chat(reasoning_effort="minimal"), "default"),
        (chat(reasoning={"effort": "medium"}), "reasoning"),
        (chat(chat_template_kwargs={"enable_thinking": True}), "reasoning"),
        (chat(chat_template_kwargs={"enable_thinking": False}), "default"),
        (chat(thinking_token_budget=1024), "reasoning"),
        ({"prompt": "Reply with <<<<<<< SEARCH blocks"}, "edit"),
        ({"prompt": "once upon a time"}, "default"),
    ],
)
def test_each_shape_from_its_fields(body: dict[str, Any], shape: str) -> None:
    assert classify(body) == shape


def test_edit_blocks_are_asked_for_in_the_instructions_not_anywhere() -> None:
    system = {"role": "system", "content": "Answer with <<<<<<< SEARCH / >>>>>>> REPLACE blocks."}
    assert classify({"messages": [system, *HI]}) == "edit"
    parts = {"role": "user", "content": [{"type": "text", "text": "<<<<<<< SEARCH please"}]}
    assert classify({"messages": [parts]}) == "edit"
    # An assistant's old answer that had blocks does not make the next question an edit.
    old = {"role": "assistant", "content": "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE"}
    assert classify({"messages": [{"role": "user", "content": "fix"}, old, *HI]}) == "default"


def test_tools_win_over_every_other_shape() -> None:
    long = [{"role": "user", "content": "word " * 40_000}]
    body = {"messages": long, "tools": [TOOL], "reasoning_effort": "high"}
    assert classify(body, long_context_tokens=1000) == "tools"


def test_long_context_by_the_threshold_or_by_the_smallest_window() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 3000}], "reasoning_effort": "high"}
    high = prompt_bounds(body)[1]
    assert classify(body) == "reasoning"  # neither a threshold nor a window
    assert classify(body, long_context_tokens=high) == "long_context"
    assert classify(body, long_context_tokens=high + 1) == "reasoning"
    assert classify(body, smallest_window=high - 1) == "long_context"
    assert classify(body, smallest_window=high) == "reasoning"  # the likeliest most fits
    # The caller's estimate is used as given (dispatch computes it once per request).
    assert classify(body, long_context_tokens=10, estimate=(0, 9)) == "reasoning"


def test_embeddings_are_default_and_every_answer_is_in_the_bounded_set() -> None:
    assert classify({"input": "word " * 9000}, door="embeddings", long_context_tokens=10) == (
        "default"
    )
    bodies = [chat(), chat(tools=[TOOL]), {"prompt": 3}, {"messages": "not a list"}, {}]
    assert {classify(b) for b in bodies} <= set(SHAPES)


# ---- [models.NAME.shapes]: validated and cross-checked at load --------------------------------


def shaped_config(shapes: dict[str, Any]) -> Any:
    from tests.harness import config_from

    ups = [
        {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
        for n in ("a", "b")
    ]
    return config_from(
        {
            "upstreams": ups,
            "models": {"m": {"upstreams": ["a"], "shapes": shapes}, "o": {"upstreams": ["b"]}},
        }
    )


def test_shape_rules_load_and_name_their_upstreams() -> None:
    cfg = shaped_config({"tools": ["b", "a"], "reasoning": "o", "long_context_tokens": 9000})
    shapes = cfg.models["m"].shapes
    assert shapes is not None
    assert shapes.upstreams_for("tools", cfg.models) == ["b", "a"]
    assert shapes.upstreams_for("reasoning", cfg.models) == ["b"]
    assert shapes.upstreams_for("edit", cfg.models) is None
    assert shapes.long_context_tokens == 9000


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"maths": ["a"]}, "maths"),  # not a shape
        ({"default": ["a"]}, "default"),  # default is the route's own upstreams
        ({"tools": ["nope"]}, "models.m.shapes.tools: unknown upstream 'nope'"),
        ({"edit": "nowhere"}, "models.m.shapes.edit: unknown route 'nowhere'"),
        ({"edit": "m"}, "cannot name the route itself"),
        ({"tools": []}, "tools"),
        ({"long_context_tokens": 0}, "long_context_tokens"),
    ],
)
def test_bad_shape_rules_fail_at_load(shapes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        shaped_config(shapes)
