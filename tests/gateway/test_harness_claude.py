"""Claude Code (the pinned npm release, `deploy/install.sh` installs it into .harness) drives a
real tool-using session through the gateway's Messages door against the scripted fake upstream:
the model calls Claude Code's Bash tool, the command really runs (a file appears), its output
goes back, Claude Code prints the final answer and exits 0. Every request is streamed; a variant
breaks the first stream, so Claude Code's non-streamed retry is what carries the session on.

The binary missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests import agents
from tests.agents import chat_requests, explain
from tests.harness import ListSink, config_from, running_gateway

MODEL = "plumbline-agent"
COMMAND = "echo plumbline-ok | tee marker.txt"
# The scripted session: Claude Code's shell tool, running the command that leaves a file.
BASH = [{"name": "Bash", "arguments": {"command": COMMAND, "description": "Print a marker"}}]


def config(base_url: str) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": "a",
                    "kind": "vllm",
                    "base_url": base_url,
                    "model": "fake-model",
                    "profile": "qwen3-thinking",
                }
            ],
            "models": {MODEL: {"profile": "qwen3-thinking", "upstreams": ["a"]}},
        }
    )


@pytest.fixture
def fake() -> Iterator[FakeHandle]:
    with running_fake(harness=BASH) as handle:
        yield handle


def run_claude(
    url: str, home: Path, workdir: Path, prompt: str = "Run the command: echo plumbline-ok"
) -> subprocess.CompletedProcess[str]:
    return agents.run_claude(url, MODEL, home, workdir, prompt)


def check_session(done: subprocess.CompletedProcess[str], fake: FakeHandle, work: Path) -> None:
    assert done.returncode == 0, explain(done)
    assert done.stdout.strip() == "All done.", explain(done)
    assert (work / "marker.txt").read_text().strip() == "plumbline-ok"
    bodies = chat_requests(fake)
    assert len(bodies) >= 2
    last = bodies[-1]["messages"]
    at = next(i for i, m in enumerate(last) if m["role"] == "assistant" and m.get("tool_calls"))
    assert last[at]["tool_calls"][0]["function"]["name"] == "Bash"
    assert last[at + 1]["role"] == "tool" and "plumbline-ok" in last[at + 1]["content"]
    # One leading system message (Claude Code's mid-conversation system turns merged into it).
    assert [m["role"] for m in last].count("system") == 1 and last[0]["role"] == "system"
    assert "x-anthropic-billing-header" not in last[0]["content"]


@pytest.mark.parametrize("reasoning", [False, True])
def test_claude_code_runs_a_shell_command_through_the_gateway(
    fake: FakeHandle, tmp_path: Path, reasoning: bool
) -> None:
    """With `reasoning`, the model thinks before each answer (as a thinking route does); Claude
    Code asked for it omitted, so none is sent, and the session runs the same."""
    if reasoning:
        fake.set_default(reasoning_field="reasoning_content", reasoning_tokens=6)
    sink = ListSink()
    work = tmp_path / "work"
    work.mkdir()
    with running_gateway(config(fake.base_url), sinks=[sink]) as url:
        done = run_claude(url, tmp_path / "home", work)
    check_session(done, fake, work)
    served = [r for r in sink.records if r.door == "messages"]
    assert len(served) >= 2 and all(r.status == 200 for r in served)
    assert all(r.stream for r in served)  # the streamed multi-turn path
    # Claude Code's first request carries what once made the door refuse it.
    first = fake.requests()[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["body"]["max_tokens"] < 32000  # clamped to the served window, and marked
    assert served[0].clamped == f"max_tokens=32000->{first['body']['max_tokens']}"
    assert all(r.reasoning_tokens == (6 if reasoning else 0) for r in served)


def test_a_broken_stream_is_retried_without_streaming(fake: FakeHandle, tmp_path: Path) -> None:
    """The first answer's stream breaks after its first chunk; Claude Code retries that request
    non-streamed, gets JSON (never SSE), and the session goes on."""
    fake.script({"disconnect_after_chunks": 1})
    sink = ListSink()
    work = tmp_path / "work"
    work.mkdir()
    with running_gateway(config(fake.base_url), sinks=[sink]) as url:
        done = run_claude(url, tmp_path / "home", work)
    check_session(done, fake, work)
    served = [r for r in sink.records if r.door == "messages"]
    assert served[0].status == 502 and served[0].stream
    assert any(not r.stream and r.status == 200 for r in served)


def test_a_deferred_tool_is_loaded_by_tool_search(tmp_path: Path) -> None:
    """The model asks ToolSearch for WebFetch (deferred: not sent until loaded); Claude Code
    answers with a tool_reference, which reaches the model as text naming the tool and its
    schema, and WebFetch is offered from then on."""
    search = [{"name": "ToolSearch", "arguments": {"query": "select:WebFetch", "max_results": 1}}]
    work = tmp_path / "work"
    work.mkdir()
    with running_fake(harness=search) as fake, running_gateway(config(fake.base_url)) as url:
        done = run_claude(url, tmp_path / "home", work, "Fetch https://example.com")
        bodies = chat_requests(fake)
    assert done.returncode == 0 and done.stdout.strip() == "All done.", explain(done)
    first, last = bodies[0], bodies[-1]
    offered = [t["function"]["name"] for t in first["tools"]]
    assert "ToolSearch" in offered and "WebFetch" not in offered
    assert "DeferredToolPlaceholder" not in offered
    assert "WebFetch" in [t["function"]["name"] for t in last["tools"]]
    result = next(m for m in last["messages"] if m["role"] == "tool")
    assert "Tool 'WebFetch' is now available." in result["content"]


def test_a_context_overflow_is_shown_as_prompt_too_long(tmp_path: Path) -> None:
    """vLLM's refusal of a prompt over its window reaches Claude Code in the wording it acts
    on: it shows "Prompt is too long" with the engine's numbers, and does not retry."""
    refusal = (
        "This model's maximum context length is 32768 tokens. However, your request has 40000 "
        "input tokens. Please reduce the length of the input messages."
    )
    work = tmp_path / "work"
    work.mkdir()
    with (
        running_fake(status=400, message=refusal) as fake,
        running_gateway(config(fake.base_url)) as url,
    ):
        done = run_claude(url, tmp_path / "home", work)
        asked = chat_requests(fake)
    assert done.returncode == 1, explain(done)
    assert done.stdout.startswith("Prompt is too long"), explain(done)
    assert "40000 tokens (limit 32768)" in done.stdout, explain(done)
    assert len(asked) == 1
