"""opencode (the pinned npm release, `deploy/install.sh` installs it into .harness) drives a real
tool-using session through the gateway's chat door against the scripted fake upstream: opencode
talks chat completions through an `@ai-sdk/openai-compatible` provider whose baseURL is the
gateway, the model calls opencode's `write` tool, the file really appears, the result goes back,
opencode prints the final answer and exits 0.

The binary missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

from pathlib import Path

from tests.agents import DONE, chat_requests, explain, run_opencode, scripted_route, tool_turn

MODEL = "plumbline-agent"
TEXT = "hi from plumbline\n"


def test_opencode_writes_a_file_through_the_gateway(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    write = [{"name": "write", "arguments": {"filePath": str(target), "content": TEXT}}]
    with scripted_route(write, MODEL) as (fake, url, sink):
        done = run_opencode(url, MODEL, tmp_path / "home", work, "Create hello.txt saying hi.")
        bodies = chat_requests(fake)
    assert done.returncode == 0, explain(done)
    assert DONE in done.stdout, explain(done)
    assert target.read_text() == TEXT
    served = [r for r in sink.records if r.door == "chat"]
    assert len(served) >= 2 and {r.status for r in served} == {200}, served
    assert all(r.stream for r in served)
    # opencode's write tool, as it offers it, and the call's result coming back to the model.
    offered = {t["function"]["name"]: t["function"] for t in bodies[-1]["tools"]}
    assert {"filePath", "content"} <= set(offered["write"]["parameters"]["required"])
    call, result = tool_turn(bodies[-1])
    assert call["tool_calls"][0]["function"]["name"] == "write"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "Wrote file successfully" in str(result["content"]), result
