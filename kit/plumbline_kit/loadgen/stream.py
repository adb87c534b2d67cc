"""One timed request: the body sent, and the bytes read back into a `Sample`.

Streams are read as bytes; only the usage chunk is JSON-decoded. TTFT is time to the first event
carrying text; ITL is the gap between such events. `stream_one` times a streamed answer,
`whole_one` a whole (non-streamed) one. Clock: ``time.perf_counter``.
"""

from __future__ import annotations

import re
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

from plumbline_kit.loadgen.shape import Shape
from plumbline_kit.loadgen.target import Endpoint, Target

_EVENT_SPLIT = re.compile(rb"\r?\n\r?\n")
# An event carries output when one of these fields holds a non-empty string, or it has tool calls.
_HAS_TEXT = re.compile(
    rb'"(?:text|content|reasoning_content|reasoning)":\s*"[^"]|"tool_calls":\s*\[\{'
)
_USAGE = re.compile(rb'"usage":\s*\{')


@dataclass
class Sample:
    """What one request measured; times are ``perf_counter`` seconds."""

    start: float
    end: float = 0.0
    first: float = 0.0
    last: float = 0.0
    events: int = 0  # events that carried text
    chunks: int = 0  # every JSON data event (text, role, usage), as a relay writes them
    first_block: float = 0.0  # the first body bytes (a stream's first chunk, whatever it holds)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    gaps: array = field(default_factory=lambda: array("d"))


def read_events(sample: Sample, events: list[bytes], now: float) -> bool:
    """Account `events` arriving at `now`; True once ``[DONE]`` is seen."""
    for event in events:
        if not event.startswith(b"data:"):
            continue
        if event.startswith(b"[DONE]", 5 + (event[5:6] == b" ")):
            return True
        sample.chunks += 1
        if _USAGE.search(event):
            usage = orjson.loads(event[5:])["usage"]
            sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            sample.completion_tokens = int(usage.get("completion_tokens") or 0)
        if _HAS_TEXT.search(event):
            if sample.events:
                sample.gaps.append(now - sample.last)
            else:
                sample.first = now
            sample.last = now
            sample.events += 1
    return False


async def stream_one(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    headers: Mapping[str, str],
    need_text: bool = True,
) -> Sample:
    """POST one streaming request and time it; errors are recorded, never raised. With
    `need_text`, a stream that carried no text is an error ("no tokens streamed")."""
    sample = Sample(start=time.perf_counter())
    done = False
    try:
        async with session.post(url, data=payload, headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.content.read(200)).decode(errors="replace")
                sample.error = f"HTTP {resp.status}: {body}".strip()
            else:
                pending = b""
                async for chunk in resp.content.iter_any():
                    if not sample.first_block:
                        sample.first_block = time.perf_counter()
                    parts = _EVENT_SPLIT.split(pending + chunk)
                    pending = parts.pop()
                    done = read_events(sample, parts, time.perf_counter()) or done
                if not done:
                    done = read_events(sample, [pending], time.perf_counter())
                if not done:
                    sample.error = "stream ended without [DONE]"
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError) as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
    sample.end = time.perf_counter()
    if need_text and not sample.error and not sample.events:
        sample.error = "no tokens streamed"
    return sample


async def whole_one(
    session: aiohttp.ClientSession, url: str, payload: bytes, headers: Mapping[str, str]
) -> Sample:
    """POST one non-streaming request and time it (one chunk: the whole answer); errors are
    recorded, never raised."""
    sample = Sample(start=time.perf_counter())
    try:
        async with session.post(url, data=payload, headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.content.read(200)).decode(errors="replace")
                sample.error = f"HTTP {resp.status}: {body}".strip()
            else:
                await resp.read()
                sample.chunks = 1
    except (TimeoutError, aiohttp.ClientError) as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
    sample.end = time.perf_counter()
    return sample


def request_body(
    target: Target, shape: Shape, prompt: str, endpoint: Endpoint, ignore_eos: bool
) -> bytes:
    """The JSON body (bytes) of one streaming request."""
    body: dict = {
        "model": target.model,
        "max_tokens": shape.output,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": shape.output}
    return orjson.dumps(body)
