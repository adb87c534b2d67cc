"""Client libraries that lean on server-held state complete multi-step tool runs through the
gateway, against a scripted upstream whose model writes text beside its tool calls:

- the Vercel AI SDK's default `openai()` provider (Responses API, `store` on: its second step
  sends the first step's text as an `item_reference` to the gateway's own stored item), pinned
  in deploy/install.sh and installed into .harness (missing is a failure, not a skip);
- the Anthropic SDK's beta `tool_runner`, which threads (`anthropic-beta: message-threads-…`):
  turn 2 sends only the tool result and `thread: {type: continue, previous_message_id}`; the
  gateway puts the stored conversation, system and tools back in front.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from tests.gateway.scripted import Answer, ScriptedUpstream, error, scripted_upstream, sse
from tests.harness import config_from, running_gateway

ROOT = Path(__file__).resolve().parents[4]
MODULES = ROOT / ".harness" / "node_modules"
SCRIPT = Path(__file__).with_name("vercel_tool_run.mjs")
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def config(url: str, tmp_path: Path) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": url, "model": "fake-model"}],
            "models": {"smol": {"upstreams": ["a"]}},
            "store": {"url": f"sqlite:///{tmp_path / 'records.db'}"},
        }
    )


def whole(text: str | None, calls: list[dict[str, str]] = ()) -> Answer:  # type: ignore[assignment]
    """A chat.completion with `text` and tool `calls` beside it."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": f"call{i}", "type": "function", "function": c} for i, c in enumerate(calls)
        ]
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return error(200, orjson.dumps(body))


def streamed(text: str, calls: list[dict[str, str]] = ()) -> Answer:  # type: ignore[assignment]
    """The same answer as a chat stream: text, then the calls, then usage and [DONE]."""

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        doc = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
        return b"data: " + orjson.dumps({**doc, "choices": [choice], **extra}) + b"\n\n"

    events = [event({"role": "assistant", "content": text})]
    for i, c in enumerate(calls):
        head = {"index": i, "id": f"call{i}", "type": "function", "function": c}
        events.append(event({"tool_calls": [head]}))
    events.append(event({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    doc = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    events.append(b"data: " + orjson.dumps({**doc, "choices": [], "usage": usage}) + b"\n\n")
    return sse([*events, b"data: [DONE]\n\n"])


def sent(upstream: ScriptedUpstream, n: int) -> dict[str, Any]:
    """The body of the upstream's `n`th chat request."""
    chats = [b for head, b in upstream.requests if b"/chat/completions" in head.split(b"\r\n")[0]]
    return json.loads(chats[n])


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with scripted_upstream() as scripted:
        yield scripted


@pytest.mark.parametrize("stream", [False, True])
def test_vercel_ai_sdk_runs_tools_on_stored_items(
    upstream: ScriptedUpstream, tmp_path: Path, stream: bool
) -> None:
    assert (MODULES / "ai").is_dir(), "the Vercel AI SDK is missing: run deploy/install.sh"
    answer = streamed if stream else whole
    upstream.script(answer("Let me check.", [CALL]), answer("It is sunny in Paris."))
    with running_gateway(config(upstream.base_url, tmp_path), record=True) as url:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "none",
            "HARNESS_MODULES": str(MODULES),
            "STREAM": "1" if stream else "0",
        }
        run = subprocess.run(
            ["node", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
        )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["text"] == "It is sunny in Paris."
    assert [s["toolCalls"] for s in result["steps"]] == [["get_weather"], []]
    assert result["steps"][0]["text"] == "Let me check."
    assert sent(upstream, 0).get("stream", False) is stream
    # the SDK sent the first step's text back as a reference to the gateway's stored item
    assert result["sentTypes"][1][:3] == ["user", "item_reference", "function_call"]
    # step 2 reached the model whole: the referenced text, the call beside it, the result
    messages = sent(upstream, 1)["messages"]
    assert messages[0] == {"role": "user", "content": "What is the weather in Paris?"}
    assert messages[1]["role"] == "assistant" and messages[1]["content"] == "Let me check."
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[2]["role"] == "tool" and "sunny" in messages[2]["content"]


@anthropic.beta_tool
def get_weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_runner_continues_its_thread(
    upstream: ScriptedUpstream, tmp_path: Path, stream: bool
) -> None:
    answer = streamed if stream else whole
    upstream.script(answer("Let me check.", [CALL]), answer("It is sunny in Paris."))
    bodies: list[dict[str, Any]] = []

    def keep(request: Any) -> None:  # an httpx2 request
        bodies.append(json.loads(request.content))

    with running_gateway(config(upstream.base_url, tmp_path), record=True) as url:
        client = anthropic.Anthropic(
            base_url=url.removesuffix("/v1"),
            api_key="none",
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [keep]}),
        )
        runner = client.beta.messages.tool_runner(
            model="smol",
            max_tokens=256,
            system="You answer weather questions.",
            tools=[get_weather],
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            stream=stream,
        )
        replies = [r.get_final_message() if stream else r for r in runner]  # type: ignore[union-attr]
    assert [b.text for b in replies[-1].content if b.type == "text"] == ["It is sunny in Paris."]
    assert bodies[0]["thread"] == {"type": "create"}
    assert bodies[1]["thread"] == {"type": "continue", "previous_message_id": replies[0].id}
    assert "system" not in bodies[1] and "tools" not in bodies[1]
    assert [m["role"] for m in bodies[1]["messages"]] == ["user"]  # the tool result only
    messages = sent(upstream, 1)["messages"]
    assert messages[0] == {"role": "system", "content": "You answer weather questions."}
    assert messages[1] == {"role": "user", "content": "Weather in Paris?"}
    assert messages[2]["content"] == "Let me check." and messages[2]["tool_calls"]
    assert messages[3]["role"] == "tool" and messages[3]["content"] == "sunny in Paris"
    assert sent(upstream, 1)["tools"][0]["function"]["name"] == "get_weather"
