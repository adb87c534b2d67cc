"""A served request leaves no reference cycle behind: whatever it made is freed by reference
counting when it ends. Each cycle is garbage only the cyclic collector frees, and at 300
requests a second a serving process's young collections came every 7 s and took 20-85 ms each,
nearly all of it freeing such cycles (`bench/housekeeping_latency.py` prints the collector's
pauses): every request in flight waited that long."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.edge.app import create_app
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, serving_server, wait_for


@pytest.fixture
def sink() -> ListSink:
    return ListSink()


@pytest.fixture
def root(fake: FakeHandle, sink: ListSink) -> Iterator[str]:
    cfg = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}],
            "models": {"m": {"upstreams": ["a"]}},
        }
    )
    app = create_app(cfg, sinks=[sink])
    uv = {"http": "gateway.edge.connection:BoundedHttp", "loop": "uvloop"}
    with serving_server(app, **uv) as (url, _server):
        yield url


def traffic(root: str, fake: FakeHandle, sink: ListSink) -> None:
    """Each door, whole and streamed, a stream with logprobs, a retry after an upstream's 503,
    a request refused by the gateway, a stream the upstream cuts and one the client leaves, and
    the gateway's own pages."""
    client = openai.OpenAI(base_url=root + "/v1", api_key="k", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model="m", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    chunks = client.chat.completions.create(
        model="m",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert list(chunks)[-1].usage is not None
    valued = client.chat.completions.create(  # token events with logprobs: the shaped taker's
        model="m",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=8,
        stream=True,
        logprobs=True,
        top_logprobs=2,
    )
    assert sum(1 for c in valued if c.choices and c.choices[0].logprobs) >= 4
    client.completions.create(model="m", prompt="hi", max_tokens=8)
    client.responses.create(model="m", input="hi", max_output_tokens=8)
    assert list(client.responses.create(model="m", input="hi", max_output_tokens=8, stream=True))
    body = {"model": "m", "max_tokens": 8, "messages": messages}
    assert httpx.post(root + "/v1/messages", json=body, timeout=30).status_code == 200
    streamed = {**body, "stream": True}
    assert httpx.post(root + "/v1/messages", json=streamed, timeout=30).status_code == 200
    fake.script({"status": 503})
    client.chat.completions.create(model="m", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    fake.script({"status": 503})
    assert list(client.chat.completions.create(model="m", messages=messages, stream=True))  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=messages)  # type: ignore[arg-type]
    for path in ("/health", "/metrics", "/v1/models"):  # what is not relayed: FastAPI's routes
        assert httpx.get(root + path, timeout=30).status_code == 200
    fake.script({"disconnect_after_chunks": 3})  # the upstream's connection ends mid-stream
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="m", messages=messages, stream=True))  # type: ignore[arg-type]
    fake.script({"pace_tps": 50.0, "tokens": 64})  # the client leaves after the first bytes
    gone = sum(1 for r in sink.records if r.status == 499)
    paced = {"model": "m", "messages": messages, "max_tokens": 64, "stream": True}
    with httpx.stream("POST", root + "/v1/chat/completions", json=paced, timeout=30) as answer:
        assert next(answer.iter_bytes())
    wait_for(lambda: sum(1 for r in sink.records if r.status == 499) > gone)


def test_requests_of_every_door_leave_no_reference_cycle(
    root: str, sink: ListSink, fake: FakeHandle
) -> None:
    # The first requests build what lives on (pools, caches, compiled code).
    traffic(root, fake, sink)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept, to be named
    try:
        for _ in range(3):
            traffic(root, fake, sink)
        gc.collect()
        ours = Counter(
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith(("gateway.", "uvicorn."))
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not ours, f"left to the cyclic collector: {dict(ours)}"
    retried = [r for r in sink.records if len(r.attempts) == 2]
    assert len(retried) == 8  # the 503s' retries, whole and streamed, in each of the 4 rounds
