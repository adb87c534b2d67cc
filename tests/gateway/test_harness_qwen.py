"""Qwen Code (the pinned npm release, `deploy/install.sh` installs it into .harness) drives a real
tool-using session through the gateway's chat door against the scripted fake upstream: Qwen Code
talks chat completions to OPENAI_BASE_URL (the gateway), the model calls its `write_file` tool
(an absolute path: it refuses a relative one), the file really appears, the result goes back,
Qwen Code prints the final answer and exits 0.

The binary missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

from pathlib import Path

from tests.agents import DONE, chat_requests, explain, run_qwen, scripted_route, tool_turn

MODEL = "plumbline-agent"
TEXT = "hi from plumbline\n"


def test_qwen_code_writes_a_file_through_the_gateway(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    write = [{"name": "write_file", "arguments": {"file_path": str(target), "content": TEXT}}]
    with scripted_route(write, MODEL) as (fake, url, sink):
        done = run_qwen(url, MODEL, tmp_path / "home", work, "Create hello.txt saying hi.")
        bodies = chat_requests(fake)
    assert done.returncode == 0, explain(done)
    assert done.stdout.strip() == DONE, explain(done)
    assert target.read_text() == TEXT
    served = [r for r in sink.records if r.door == "chat"]
    assert len(served) >= 2 and {r.status for r in served} == {200}, served
    assert all(r.stream for r in served)
    offered = {t["function"]["name"]: t["function"] for t in bodies[-1]["tools"]}
    assert {"file_path", "content"} <= set(offered["write_file"]["parameters"]["required"])
    call, result = tool_turn(bodies[-1])
    assert call["tool_calls"][0]["function"]["name"] == "write_file"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "Successfully" in str(result["content"]), result
