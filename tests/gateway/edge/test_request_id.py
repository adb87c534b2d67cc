"""Every answer names its request (`gateway/edge/request_id.py`): `x-request-id` (the client's own
when it sent one) and `x-plumbline-request-id` (the gateway's, the record's), on success and on
every refusal: a 502 before a stream starts, 413, 401, 400, 404, 405, in either door's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.edge.access import hash_key
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.scripted import ScriptedUpstream, error, scripted_upstream
from tests.harness import ListSink, config_from, serving

KEY = "pl-request-id-test-key"
HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "smol", "messages": HI}
MESSAGES = {"model": "smol", "max_tokens": 16, "messages": HI}

# (method, path, what is sent, the status it gets)
CASES: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "chat_whole": ("POST", "/v1/chat/completions", {"json": CHAT}, 200),
    "chat_stream": ("POST", "/v1/chat/completions", {"json": {**CHAT, "stream": True}}, 200),
    "messages_stream": ("POST", "/v1/messages", {"json": {**MESSAGES, "stream": True}}, 200),
    "502_before_the_stream": (
        "POST",
        "/v1/chat/completions",
        {"json": {**CHAT, "model": "bad", "stream": True}},
        502,
    ),
    "502_whole": ("POST", "/v1/completions", {"json": {"model": "bad", "prompt": "x"}}, 502),
    "400_not_json": ("POST", "/v1/chat/completions", {"content": b"{not json"}, 400),
    "400_invalid": ("POST", "/v1/chat/completions", {"json": {"model": "smol"}}, 400),
    "400_messages": ("POST", "/v1/messages", {"json": {"model": "smol"}}, 400),
    "401_no_key": ("POST", "/v1/chat/completions", {"json": CHAT, "headers": {}}, 401),
    "401_bad_key": (
        "POST",
        "/v1/chat/completions",
        {"json": CHAT, "headers": {"authorization": "Bearer nope"}},
        401,
    ),
    "404_model": ("POST", "/v1/chat/completions", {"json": {**CHAT, "model": "nope"}}, 404),
    "404_path": ("GET", "/v1/nope", {}, 404),
    "405": ("GET", "/v1/chat/completions", {}, 405),
    "413": ("POST", "/v1/chat/completions", {"json": {**CHAT, "pad": "x" * 20_000}}, 413),
    "health": ("GET", "/health", {"headers": {}}, 200),
}


@pytest.fixture
def bad() -> Iterator[ScriptedUpstream]:
    with scripted_upstream() as up:
        yield up


@pytest.fixture
def gateway(fake: FakeHandle, bad: ScriptedUpstream) -> Iterator[tuple[str, ListSink]]:
    config = config_from(
        {
            "server": {
                "health_interval_s": 0,
                "retry_backoff_s": 0,
                "retries": 0,
                "max_body_bytes": 10_000,
            },
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"},
                {"name": "down", "kind": "vllm", "base_url": bad.base_url, "model": "m"},
            ],
            "models": {"smol": {"upstreams": ["a"]}, "bad": {"upstreams": ["down"]}},
            "access": {"keys": [{"id": "alice", "sha256": hash_key(KEY)}]},
        }
    )
    sink = ListSink()
    with serving(config, sinks=[sink]) as (url, _app):
        yield url.removesuffix("/v1"), sink


@pytest.mark.parametrize("own", [None, "client-trace-0042"], ids=["generated", "echoed"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_answer_carries_the_request_ids(
    gateway: tuple[str, ListSink], bad: ScriptedUpstream, case: str, own: str | None
) -> None:
    root, sink = gateway
    method, path, sent, status = CASES[case]
    bad.script(error(500, b'{"error":{"message":"down"}}'))
    headers = dict(sent.get("headers", {"authorization": f"Bearer {KEY}"}))
    if own is not None:
        headers["x-request-id"] = own
    kwargs = {k: v for k, v in sent.items() if k != "headers"}
    resp = httpx.request(method, f"{root}{path}", headers=headers, timeout=20, **kwargs)
    assert resp.status_code == status, resp.text
    gateway_id = resp.headers["x-plumbline-request-id"]
    assert gateway_id.startswith("req-") and len(gateway_id) == 28
    assert resp.headers["x-request-id"] == (own or gateway_id)
    if status in (200, 502) and path.startswith("/v1/") and method == "POST":
        [record] = sink.records
        assert record.request_id == gateway_id  # the record is found by the id the client saw


def test_an_unusable_client_id_is_not_echoed(gateway: tuple[str, ListSink]) -> None:
    root, _ = gateway
    for odd in (b"x" * 129, b"has space", "caf\u00e9".encode()):
        resp = httpx.post(
            f"{root}/v1/chat/completions",
            json=CHAT,
            headers={
                "authorization": f"Bearer {KEY}",
                "x-request-id": odd,
            },
            timeout=20,
        )
        assert resp.headers["x-request-id"] == resp.headers["x-plumbline-request-id"]
