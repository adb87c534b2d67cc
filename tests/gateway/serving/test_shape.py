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


def ask(text: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    }


@pytest.mark.parametrize(
    "text",
    [
        "What is 12 + 30?",
        "Solve 3x + 5 = 20 for x.",
        "Prove that the square root of 2 is irrational.",
        "Compute the sum of the first 100 positive integers.",
        "Find the derivative of sin(x) * x.",
        "Evaluate \\int_0^1 x^2 dx.",
        "How many ways can 5 people sit at a round table of 5 seats?",
        "If x = 4, what is x^2 - 1?",
        "What is the remainder when 2^100 is divided by 7?",
        "Simplify (a+b)(a-b).",
        "Let n ≥ 3 be an integer; show the polygon has n(n-3)/2 diagonals.",
    ],
)
def test_maths_problems_are_the_math_shape(text: str) -> None:
    assert classify(ask(text)) == "math"
    assert classify({"prompt": text}) == "math"


@pytest.mark.parametrize(
    "text",
    [
        "hi",
        "Write a haiku about the sea.",
        "The meeting is on 2024-12-04 at 10:30; can you move it?",
        "Compute the checksum of a file in Python:\n```python\nimport hashlib\n```",
        "How many languages do you speak?",  # a question, and no number in it
        "Add 1/2 cup of sugar.",
        "Summarise version 3.10-2's changelog.",
    ],
)
def test_other_prompts_are_not_maths(text: str) -> None:
    assert classify(ask(text)) == "default"


def test_only_the_last_user_message_is_read_for_maths_and_asking_to_think_wins() -> None:
    earlier = [
        {"role": "user", "content": "What is 12 + 30?"},
        {"role": "assistant", "content": "42"},
    ]
    body = {"messages": [*earlier, {"role": "user", "content": "thanks, and a poem?"}]}
    assert classify(body) == "default"
    assert classify({**ask("Prove it."), "reasoning_effort": "high"}) == "reasoning"
    parts = [{"type": "text", "text": "Solve"}, {"type": "text", "text": "x^2 = 9"}]
    assert classify({"messages": [{"role": "user", "content": parts}]}) == "math"


def test_every_item_of_the_math_family_is_the_math_shape() -> None:
    """The family the math shape is gated on is what the shape catches."""
    from evals.families.math import build

    items = build(0)
    assert items and all(classify({"messages": list(i.messages)}) == "math" for i in items)
