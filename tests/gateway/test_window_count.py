"""The real path: Claude Code's first request, as captured (51 KB: its system prompt, 12 tools,
`max_tokens: 32000`; tests/gateway/edge/doors/messages/claude_code_request.json), through the
Messages door to the real vLLM CPU replica serving SmolLM2 (8,192 tokens). Its byte estimate is near
the window, so the gateway counts the prompt with the GGUF's own tokenizer and clamps `max_tokens:
32000` to the room vLLM's own count leaves: within 5% of it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from gateway.config import Config
from gateway.edge.doors.messages.translation import chat_request
from gateway.serving.adapt import prompt_bounds
from tests.harness import ListSink, running_gateway, wait_for

pytestmark = pytest.mark.slow

CAPTURED = Path(__file__).parent / "edge" / "doors" / "messages" / "claude_code_request.json"


@pytest.fixture(scope="module")
def served(local_stack: Config) -> Iterator[tuple[str, ListSink]]:
    records = ListSink()
    with running_gateway(local_stack, sinks=[records]) as url:
        yield url, records


def test_claude_codes_first_request_is_clamped_to_vllms_room(
    local_stack: Config, served: tuple[str, ListSink]
) -> None:
    url, records = served
    window = local_stack.upstream_window(local_stack.upstream("smol-vllm"))
    assert window == 8192
    body: dict[str, Any] = orjson.loads(CAPTURED.read_bytes()) | {"model": "smollm2"}
    low, high = prompt_bounds(chat_request(body).chat)
    assert low < window < high + body["max_tokens"]  # near the window by the bytes
    body |= {"stream": False, "stop_sequences": [" ", "\n", "."]}  # a short answer on a CPU
    before = len(records.records)
    # As Claude Code sends it (the anthropic client refuses its newer fields).
    raw = httpx.post(url.removesuffix("/v1") + "/v1/messages?beta=true", json=body, timeout=600)
    assert raw.status_code == 200, raw.text
    message = anthropic.types.Message.model_validate(raw.json())
    assert raw.headers["x-plumbline-upstream"] == "smol-vllm"
    clamped = re.fullmatch(r"max_tokens=32000->(\d+)", raw.headers["x-plumbline-clamped"])
    assert clamped is not None
    usage = message.usage
    vllm_prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    room = window - vllm_prompt
    given = int(clamped.group(1))
    by_bytes = window - high if window - high >= 1 else window - low  # adapt without a count
    print(f"vLLM prompt {vllm_prompt}, room {room}; clamp {given}; the bytes' clamp {by_bytes}")
    assert abs(given - room) <= 0.05 * room
    assert given > by_bytes
    wait_for(lambda: len(records.records) > before)
    record = records.records[-1]
    assert record.prompt_counted is not None and record.prompt_tokens == vllm_prompt
