"""Codex CLI (the pinned npm release, `deploy/install.sh` installs it into .harness) drives a real
tool-using session through the gateway's Responses door against the scripted fake upstream: the
model calls Codex's shell, the command really runs, its output goes back, Codex prints the final
answer and exits 0. Variants: a namespaced tool (Codex answers `unsupported call` unless the call
comes back with `namespace` and its bare name) and the freeform `apply_patch` tool (sent for the
`gpt-5.5` slug).

The binary missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plumbline_kit.fakes.upstream import FakeHandle
from tests.agents import chat_requests, explain, run_codex, tool_turn
from tests.harness import ListSink, config_from, running_gateway

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


def config(base_url: str, aliases: tuple[str, ...] = ()) -> Any:
    """A route `smol` on the fake upstream, with `aliases`."""
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                {
                    "name": "a",
                    "kind": "vllm",
                    "base_url": base_url,
                    "model": "fake-model",
                    "profile": "smollm2",
                }
            ],
            "models": {
                "smol": {"profile": "smollm2", "upstreams": ["a"], "aliases": list(aliases)}
            },
        }
    )


@pytest.fixture
def codex_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "codex-home"
    home.mkdir()
    yield home


def served(sink: ListSink) -> list[int]:
    return [r.status for r in sink.records if r.door == "responses"]


def test_codex_runs_a_shell_command_through_the_gateway(
    fake: FakeHandle, codex_home: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo plumbline-ok | tee marker.txt"
    fake.set_default(harness=[{"name": "exec_command", "arguments": {"cmd": command}}])
    sink = ListSink()
    with running_gateway(config(fake.base_url), sinks=[sink]) as url:
        done = run_codex(url, "smol", codex_home, work, "Run: echo plumbline-ok")
    assert done.returncode == 0, explain(done)
    assert done.stdout.strip().splitlines()[-1] == "All done.", explain(done)
    assert (work / "marker.txt").read_text().strip() == "plumbline-ok"
    statuses = served(sink)
    assert len(statuses) >= 2 and set(statuses) == {200}, statuses
    last = chat_requests(fake)[-1]
    call, result = tool_turn(last)
    assert call["tool_calls"][0]["function"]["name"] == "exec_command"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "plumbline-ok" in result["content"]
    # What Codex sends and the upstream must not see: hosted tools, its telemetry.
    assert all(t["type"] == "function" for t in last["tools"])
    assert "client_metadata" not in last and "prompt_cache_key" not in last
    assert any(r.dropped and "tools[type=web_search]" in r.dropped for r in sink.records)


def test_codex_namespaced_tool_round_trips(
    fake: FakeHandle, codex_home: Path, tmp_path: Path
) -> None:
    """The model calls the flattened `multi_agent_v1__close_agent`; Codex must get it back as
    namespace `multi_agent_v1` + `close_agent` and run it (else it answers `unsupported call`)."""
    work = tmp_path / "work"
    work.mkdir()
    name = "multi_agent_v1__close_agent"
    fake.set_default(harness=[{"name": name, "arguments": {"target": "x"}}])
    sink = ListSink()
    with running_gateway(config(fake.base_url), sinks=[sink]) as url:
        done = run_codex(url, "smol", codex_home, work, "Close agent x.")
    assert done.returncode == 0, explain(done)
    assert done.stdout.strip().splitlines()[-1] == "All done.", explain(done)
    first, last = chat_requests(fake)[0], chat_requests(fake)[-1]
    assert name in {t["function"]["name"] for t in first["tools"]}
    call, result = tool_turn(last)
    assert call["tool_calls"][0]["function"]["name"] == name  # history re-flattened
    assert not result["content"].startswith("unsupported call"), result["content"]


def test_codex_apply_patch_custom_tool(fake: FakeHandle, codex_home: Path, tmp_path: Path) -> None:
    """`gpt-5.5` (here an alias of the route) is a slug Codex knows: it sends the freeform
    `apply_patch` tool, which the door offers as a function of one string `input` and returns as
    a `custom_tool_call`."""
    work = tmp_path / "work"
    work.mkdir()
    fake.set_default(harness=[{"name": "apply_patch", "arguments": {"input": PATCH}}])
    sink = ListSink()
    with running_gateway(config(fake.base_url, aliases=("gpt-5.5",)), sinks=[sink]) as url:
        done = run_codex(url, "gpt-5.5", codex_home, work, "Create hello.txt saying hi.")
    assert done.returncode == 0, explain(done)
    assert done.stdout.strip().splitlines()[-1] == "All done.", explain(done)
    assert (work / "hello.txt").read_text() == "hi\n"
    first, last = chat_requests(fake)[0], chat_requests(fake)[-1]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["apply_patch"]["parameters"]["required"] == ["input"]
    call, result = tool_turn(last)
    assert call["tool_calls"][0]["function"]["name"] == "apply_patch"
    assert "Success" in result["content"], result["content"]
    assert set(served(sink)) == {200}
