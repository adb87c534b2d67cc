"""How a shadow's answer agrees with the primary's (`gateway/trust/agreement.py`)."""

from __future__ import annotations

from gateway.trust.agreement import Answer, agreement, text_agreement, tool_agreement
from gateway.trust.capture import ToolCall


def test_text_agreement_exact_normalised_different() -> None:
    assert text_agreement("The answer is 42.", "The answer is 42.") == "exact"
    assert text_agreement("The answer is 42.", "the  answer is 42") == "normalised"
    assert text_agreement("The answer is 42.", "The answer is 24.") == "different"


def test_tool_agreement_compares_parsed_arguments_in_any_order() -> None:
    a = [ToolCall("f", '{"x": 1, "y": [1, 2]}'), ToolCall("g", "{}")]
    b = [ToolCall("g", ""), ToolCall("f", '{"y":[1,2],"x":1}')]
    assert tool_agreement(a, b) == "tools_same"
    assert (
        tool_agreement(a, [ToolCall("f", '{"x": 2, "y": [1, 2]}'), ToolCall("g", "{}")])
        == "tools_different"
    )
    assert tool_agreement([ToolCall("f", "{bad")], [ToolCall("f", "{bad")]) == "tools_same"
    assert tool_agreement([ToolCall("f", "{bad")], [ToolCall("f", "{}")]) == "tools_different"


def test_agreement_precedence() -> None:
    ok = Answer(True, "x")
    assert agreement(Answer(False), ok) == "primary_failed"
    assert agreement(ok, Answer(False)) == "shadow_failed"
    assert (
        agreement(Answer(True, "x", verdict="correct"), Answer(True, "y", verdict="correct"))
        == "verdict_same"
    )
    assert (
        agreement(Answer(True, "x", (ToolCall("f", "{}"),)), Answer(True, "x")) == "tools_different"
    )
    assert agreement(ok, Answer(True, "X!")) == "normalised"
