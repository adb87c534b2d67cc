"""The chat-completions harnesses (the pinned npm releases `deploy/install.sh` installs into
.harness) each drive a real tool-using session through the gateway's chat door against the
scripted fake upstream: the model calls the harness's own write tool, the file really appears,
the result goes back, the harness prints the final answer and exits 0.

- opencode talks chat completions through an `@ai-sdk/openai-compatible` provider whose baseURL
  is the gateway; its tool is `write` (`filePath`).
- Qwen Code talks chat completions to OPENAI_BASE_URL (the gateway); its tool is `write_file`
  (`file_path`, an absolute path: it refuses a relative one), and it prints the answer alone.

The binary missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents import (
    DONE,
    chat_requests,
    explain,
    run_opencode,
    run_qwen,
    scripted_route,
    tool_turn,
)

MODEL = "plumbline-agent"
TEXT = "hi from plumbline\n"


@dataclass(frozen=True)
class Harness:
    run: Callable[..., Any]
    tool: str  # the write tool as the harness offers it
    path_arg: str  # its path argument
    wrote: str  # what its tool result says on success
    answer_alone: bool  # stdout is the final answer and nothing else


HARNESSES = {
    "opencode": Harness(run_opencode, "write", "filePath", "Wrote file successfully", False),
    "qwen-code": Harness(run_qwen, "write_file", "file_path", "Successfully", True),
}


@pytest.mark.parametrize("name", list(HARNESSES))
def test_a_chat_harness_writes_a_file_through_the_gateway(name: str, tmp_path: Path) -> None:
    h = HARNESSES[name]
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    write = [{"name": h.tool, "arguments": {h.path_arg: str(target), "content": TEXT}}]
    with scripted_route(write, MODEL) as (fake, url, sink):
        done = h.run(url, MODEL, tmp_path / "home", work, "Create hello.txt saying hi.")
        bodies = chat_requests(fake)
    assert done.returncode == 0, explain(done)
    if h.answer_alone:
        assert done.stdout.strip() == DONE, explain(done)
    else:
        assert DONE in done.stdout, explain(done)
    assert target.read_text() == TEXT
    served = [r for r in sink.records if r.door == "chat"]
    assert len(served) >= 2 and {r.status for r in served} == {200}, served
    assert all(r.stream for r in served)
    # The write tool, as the harness offers it, and the call's result coming back to the model.
    offered = {t["function"]["name"]: t["function"] for t in bodies[-1]["tools"]}
    assert {h.path_arg, "content"} <= set(offered[h.tool]["parameters"]["required"])
    call, result = tool_turn(bodies[-1])
    assert call["tool_calls"][0]["function"]["name"] == h.tool
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert h.wrote in str(result["content"]), result
