"""What the fake upstream answers, as pure functions: behaviours, plans, rendered bodies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plumbline_kit.fakes.answer import ID_MARK, body_template, stream_template
from plumbline_kit.fakes.behaviour import BehaviourError, overlay, validate_behaviour
from plumbline_kit.fakes.plan import HARNESS_CALLS, cut_at_stop, make_plan

MSGS = [{"role": "user", "content": "three little words"}]


def test_validate_and_overlay() -> None:
    with pytest.raises(BehaviourError, match="unknown"):
        validate_behaviour({"nope": 1})
    with pytest.raises(BehaviourError):
        validate_behaviour({"pace_tps": 0})
    assert overlay({"tokens": 3, "pace_tps": 10}, {"pace_tps": None}) == {"tokens": 3}


def test_cut_at_stop_inside_a_token() -> None:
    pieces = [("r", "x"), ("c", "ab"), ("c", "cd"), ("c", "ef")]
    assert cut_at_stop(pieces, ["d"]) == ([("r", "x"), ("c", "ab"), ("c", "c")], "d")
    assert cut_at_stop(pieces, ["zz"]) == (pieces, None)


@given(
    tokens=st.integers(0, 40),
    cap=st.none() | st.integers(1, 50),
    n=st.integers(1, 3),
    stop=st.sampled_from([None, " tok3", "ok1", "zz"]),
    reasoning=st.sampled_from([None, "reasoning", "both"]),
    leak=st.sampled_from([False, True, "close_only"]),
)
def test_stream_and_non_stream_agree(
    tokens: int, cap: int | None, n: int, stop: str | None, reasoning: str | None, leak: object
) -> None:
    body = {"messages": MSGS, "max_tokens": cap, "n": n, "stop": stop}
    beh = {
        k: v
        for k, v in {"tokens": tokens, "reasoning_field": reasoning, "leak_think": leak}.items()
        if v
    }
    plan = make_plan("chat", body, beh, "m")
    uncapped = make_plan("chat", {**body, "max_tokens": None}, beh, "m")
    cut = cap is not None and cap < len(uncapped.pieces)
    assert plan.pieces == (uncapped.pieces[:cap] if cut else uncapped.pieces)
    assert (plan.finish_reason == "length") == cut
    full = json.loads(b"rid".join(body_template(plan, 1)) + b"}")
    tpl = stream_template(plan, 1)
    events = [json.loads(b"rid".join(ev)[len("data: ") :]) for ev in tpl.events]
    assert ID_MARK not in json.dumps(events) and {e["id"] for e in events} == {"chatcmpl-rid"}
    for c in range(n):
        deltas = [ch["delta"] for e in events for ch in e["choices"] if ch["index"] == c]
        streamed = "".join(d.get("content") or "" for d in deltas)
        assert streamed == full["choices"][c]["message"]["content"]
        finishes = [ch["finish_reason"] for e in events for ch in e["choices"] if ch["index"] == c]
        assert [f for f in finishes if f] == [plan.finish_reason]


def _shell_tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def test_harness_turns_are_decided_by_content() -> None:
    """The scripted harness session: a call of the shell tool the request offers, `All done.`
    once a tool result is last, `ok` for side requests; the same request, the same answer."""
    ask = {"messages": [{"role": "user", "content": "run it"}], "tools": [_shell_tool("Bash")]}
    first = make_plan("chat", ask, {"harness": True}, "m")
    assert first.tool_call == ("Bash", json.dumps(HARNESS_CALLS[1]["arguments"]))
    assert first.finish_reason == "tool_calls"
    assert make_plan("chat", ask, {"harness": True}, "m") == first
    codex = {**ask, "tools": [_shell_tool("spawn_agent"), _shell_tool("exec_command")]}
    assert make_plan("chat", codex, {"harness": True}, "m").tool_call == (
        "exec_command",
        '{"cmd": "echo plumbline-ok"}',
    )
    done = {
        "messages": [
            *ask["messages"],
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c", "content": "plumbline-ok"},
        ],
        "tools": ask["tools"],
    }
    after = make_plan("chat", done, {"harness": True}, "m")
    assert (after.tool_call, "".join(t for _, t in after.pieces)) == (None, "All done.")
    side = make_plan("chat", {"messages": ask["messages"]}, {"harness": True}, "m")
    assert "".join(t for _, t in side.pieces) == "ok"
    own = [{"name": "multi_agent_v1__close_agent", "arguments": {"target": "x"}}]
    ns = {**ask, "tools": [_shell_tool("multi_agent_v1__close_agent")]}
    assert make_plan("chat", ns, {"harness": own}, "m").tool_call == (
        "multi_agent_v1__close_agent",
        '{"target": "x"}',
    )
    with pytest.raises(BehaviourError):
        validate_behaviour({"harness": [{"name": "x", "extra": 1}]})
