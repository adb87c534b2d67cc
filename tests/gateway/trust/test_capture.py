"""What a request answered: tool-call checks, the capture of streamed and whole answers, and
the text sampler (`gateway/trust/capture.py`)."""

from __future__ import annotations

import pytest

from gateway.trust.capture import Capture, TextSampler, ToolCall, check_tool_calls
from tests.gateway.trust.test_watchdog import ADD, MESSAGES, record

# ---- tool calls ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (ToolCall("add", '{"a": 1, "b": 2}'), None),
        (ToolCall("add", '{"a": 1, "b": '), "invalid_json"),
        (ToolCall("add", "[1, 2]"), "invalid_json"),
        (ToolCall("mul", '{"a": 1, "b": 2}'), "unknown_tool"),
        (ToolCall("add", '{"a": "1", "b": 2}'), "schema"),
        (ToolCall("add", '{"a": 1}'), "schema"),
        (ToolCall("add", '{"a": 1, "b": 2, "c": 3}'), "schema"),
        (ToolCall(None, "{}"), "unknown_tool"),
    ],
)
def test_check_tool_calls_names_the_problem(call: ToolCall, kind: str | None) -> None:
    problems = check_tool_calls([ADD], [call])
    assert [p.split(":")[0] for p in problems] == ([kind] if kind else [])


def test_a_broken_client_schema_is_not_the_models_fault() -> None:
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
    assert check_tool_calls([broken], [ToolCall("f", '{"x": 1}')]) == []


# ---- capture and sampler -------------------------------------------------------------------


def test_capture_assembles_streamed_tool_calls_and_flags_schema_breaks() -> None:
    r = record()
    cap = Capture(r, [ADD], keep_text=False)
    first = {"index": 0, "function": {"name": "add", "arguments": '{"a": 1'}}
    cap.delta(0, {"tool_calls": [first]})
    cap.delta(0, {"tool_calls": [{"index": 0, "function": {"arguments": ', "b": "two"}'}}]})
    cap.delta(1, {"tool_calls": [{"index": 0, "function": {"name": "zzz", "arguments": "{}"}}]})
    cap.finish()
    assert cap.tool_calls() == [ToolCall("add", '{"a": 1, "b": "two"}')]
    assert r.tool_call_error == "schema"
    assert r.sampled is False and cap.answer == ""


def test_capture_flags_degenerate_answers_and_reasoning_only_when_sampled() -> None:
    r = record()
    cap = Capture(r, None, keep_text=True)
    for piece in ["111", "222", "333", "444", "111", "222", "333", "444"]:
        cap.delta(0, {"content": piece + " "})
    cap.finish()
    assert r.sampled and r.degenerate
    healthy = record()
    cap = Capture(healthy, None, keep_text=True)
    cap.message(0, {"content": "Paris is the capital of France.", "reasoning_content": "easy"})
    cap.finish()
    assert healthy.sampled and not healthy.degenerate
    loop = record()
    cap = Capture(loop, None, keep_text=True)
    cap.message(0, {"content": "ok", "reasoning": "wait " * 80})
    cap.finish()
    assert loop.degenerate


def test_capture_keeps_a_bounded_amount_of_text() -> None:
    cap = Capture(record(), None, keep_text=True, max_chars=300)
    for _ in range(100):
        cap.delta(0, {"content": "abcdefghij"})
    assert len(cap.answer) == 300


def test_sampler_is_cheap_when_not_sampling() -> None:
    draws = iter([0.9, 0.01])
    sampler = TextSampler(0.05, rand=lambda: next(draws))
    assert sampler.start(record(), {"messages": MESSAGES}) is None  # 0.9: not sampled
    sampled = sampler.start(record(), {"messages": MESSAGES})
    assert sampled is not None and sampled.keep_text
    never = TextSampler(0.0)
    with_tools = never.start(record(), {"messages": MESSAGES, "tools": [ADD]})
    assert with_tools is not None and not with_tools.keep_text  # tools: always checked
    shadowed = never.start(record(), {"messages": MESSAGES}, always=True)
    assert shadowed is not None and shadowed.keep_text
