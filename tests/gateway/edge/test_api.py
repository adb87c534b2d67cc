"""The OpenAI front door end to end: the real `openai` client -> gateway -> fake upstream."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import pytest

from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, free_port, running_gateway, wait_for


def gateway_config(
    *upstreams: tuple[str, str],
    policy: str = "least_outstanding",
    fallback: list[str] | None = None,
    **server: Any,
) -> Any:
    ups = [
        {"name": name, "kind": "vllm", "base_url": url, "model": "fake-model", "profile": "smollm2"}
        for name, url in upstreams
    ]
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, **server},
            "upstreams": ups,
            "models": {
                "smol": {
                    "profile": "smollm2",
                    "upstreams": [n for n, _ in upstreams if n not in (fallback or [])],
                    "fallback": fallback or [],
                    "policy": policy,
                }
            },
        }
    )


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)


MESSAGES = [{"role": "user", "content": "hello"}]


def test_non_streaming_chat_matches_upstream_usage(fake: FakeHandle) -> None:
    fake.set_default(tokens=7, cached_tokens=2)
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        raw = client(url).chat.completions.with_raw_response.create(model="smol", messages=MESSAGES)
        reply = raw.parse()
    assert raw.headers["x-plumbline-upstream"] == "a"
    assert raw.headers["x-plumbline-request-id"].startswith("req-")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 7
    assert reply.usage.prompt_tokens_details.cached_tokens == 2
    assert reply.model == "smol"  # the public name, not the upstream's id


def test_streaming_chat_and_usage_only_when_asked(fake: FakeHandle) -> None:
    fake.set_default(tokens=5)
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        c = client(url)
        chunks = list(c.chat.completions.create(model="smol", messages=MESSAGES, stream=True))
        with_usage = list(
            c.chat.completions.create(
                model="smol", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
    # The gateway always asks the upstream for usage, and strips it when the client did not.
    assert all(ch.usage is None for ch in chunks)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.split() == [f"tok{i}" for i in range(5)]
    assert with_usage[-1].usage is not None and with_usage[-1].usage.completion_tokens == 5
    assert fake.requests()[0]["body"]["stream_options"] == {"include_usage": True}


def test_profile_sampling_arrives_explicitly_and_client_values_win(fake: FakeHandle) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        c = client(url)
        c.chat.completions.create(model="smol", messages=MESSAGES)
        c.chat.completions.create(model="smol", messages=MESSAGES, temperature=1.3)
    first, second = (r["body"] for r in fake.requests())
    assert first["temperature"] == 0.2 and first["top_p"] == 0.9  # the smollm2 profile
    assert second["temperature"] == 1.3 and second["top_p"] == 0.9
    assert "max_tokens" not in first  # the gateway never injects a cap
    assert first["model"] == "fake-model"


@pytest.mark.parametrize("leak", [True, "close_only"])
def test_reasoning_leak_is_split_non_streaming(fake: FakeHandle, leak: Any) -> None:
    fake.set_default(leak_think=leak, tokens=4)
    cfg = gateway_config(("a", fake.base_url))
    if leak == "close_only":  # a Qwen3-style template opened <think> in the prompt
        data = cfg.model_dump()
        data["upstreams"][0]["reasoning"] = "gateway"
        data["profiles"]["smollm2"]["think_in_prompt"] = True
        data.pop("root", None)
        cfg = config_from(data)
    with running_gateway(cfg) as url:
        raw = client(url).chat.completions.with_raw_response.create(model="smol", messages=MESSAGES)
        msg = raw.parse().choices[0].message
    assert raw.headers["x-plumbline-reasoning-leak"] == "true"
    assert "<think>" not in (msg.content or "") and "</think>" not in (msg.content or "")
    assert msg.content.split() == [f"tok{i}" for i in range(4)]
    extra = msg.model_extra or {}
    assert extra.get("reasoning_content") and extra.get("reasoning") == extra["reasoning_content"]


def test_reasoning_leak_is_split_streaming(fake: FakeHandle) -> None:
    fake.set_default(leak_think=True, tokens=4)
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        chunks = list(
            client(url).chat.completions.create(model="smol", messages=MESSAGES, stream=True)
        )
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    reasoning = "".join(
        (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for ch in chunks
        if ch.choices
    )
    assert "think>" not in content and content.split() == [f"tok{i}" for i in range(4)]
    assert reasoning.strip()


def test_truncation_is_marked(fake: FakeHandle) -> None:
    fake.set_default(tokens=50)
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        raw = client(url).chat.completions.with_raw_response.create(
            model="smol", messages=MESSAGES, max_tokens=3
        )
        reply = raw.parse()
        stream = httpx.post(
            f"{url}/chat/completions",
            json={"model": "smol", "messages": MESSAGES, "max_tokens": 3, "stream": True},
            timeout=10,
        )
    assert reply.choices[0].finish_reason == "length"
    assert raw.headers["x-plumbline-truncated"] == "length"
    assert ": plumbline truncated finish_reason=length max_tokens=3" in stream.text
    assert stream.text.rstrip().endswith("data: [DONE]")


def test_retry_before_first_byte_is_invisible(fake: FakeHandle) -> None:
    fake.script({"status": 503}, {"status": 429, "retry_after": 0})
    cfg = gateway_config(("a", fake.base_url), retries=2)
    with running_gateway(cfg) as url:
        reply = client(url).chat.completions.create(model="smol", messages=MESSAGES)
    assert reply.choices[0].finish_reason == "stop"
    assert len(fake.requests()) == 3


def test_no_switch_after_first_byte(fake: FakeHandle, fake2: FakeHandle) -> None:
    fake.set_default(tokens=20, disconnect_after_chunks=3)
    cfg = gateway_config(("a", fake.base_url), ("b", fake2.base_url), fallback=["b"])
    with running_gateway(cfg) as url:
        received = []
        with pytest.raises(openai.APIError) as info:
            for ch in client(url).chat.completions.create(
                model="smol", messages=MESSAGES, stream=True
            ):
                received.append(ch)
    assert received  # the first bytes reached the client…
    assert "broke the stream" in str(info.value) or "malformed" in str(info.value)
    assert fake2.requests() == []  # …so the gateway did not switch upstream


def test_fallback_when_primary_is_down(fake: FakeHandle) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg = gateway_config(("dead", dead), ("b", fake.base_url), fallback=["b"])
    with running_gateway(cfg) as url:
        raw = client(url).chat.completions.with_raw_response.create(model="smol", messages=MESSAGES)
    assert raw.headers["x-plumbline-upstream"] == "b"


def test_first_byte_timeout_moves_to_next_candidate(fake: FakeHandle, fake2: FakeHandle) -> None:
    fake.set_default(hang_before_first_byte=5)
    cfg = gateway_config(
        ("slow", fake.base_url),
        ("b", fake2.base_url),
        fallback=["b"],
        ttft_timeout_s=0.3,
        retries=3,
    )
    with running_gateway(cfg) as url:
        raw = client(url).chat.completions.with_raw_response.create(
            model="smol", messages=MESSAGES, stream=True
        )
        list(raw.parse())
    assert raw.headers["x-plumbline-upstream"] == "b"
    assert len(fake.requests()) <= 1  # a first-byte timeout is not retried on the same upstream


def test_all_upstreams_failing_is_a_clear_502(fake: FakeHandle) -> None:
    fake.set_default(status=500)
    with running_gateway(gateway_config(("a", fake.base_url), retries=0)) as url:
        r = httpx.post(f"{url}/chat/completions", json={"model": "smol", "messages": MESSAGES})
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    assert "answered 500" in r.json()["error"]["message"]


def test_prefix_affinity_keeps_a_prefix_on_one_replica(fake: FakeHandle, fake2: FakeHandle) -> None:
    cfg = gateway_config(("a", fake.base_url), ("b", fake2.base_url), policy="prefix_affinity")
    shared = "You are a meticulous assistant. " * 80
    with running_gateway(cfg) as url:
        c = client(url)
        seen = set()
        for i in range(8):
            raw = c.chat.completions.with_raw_response.create(
                model="smol",
                messages=[
                    {"role": "system", "content": shared},
                    {"role": "user", "content": f"question {i}"},
                ],
            )
            seen.add(raw.headers["x-plumbline-upstream"])
        # A different prefix is free to go anywhere; the shared one stayed put.
    assert len(seen) == 1


def test_session_header_pins_a_replica(fake: FakeHandle, fake2: FakeHandle) -> None:
    cfg = gateway_config(("a", fake.base_url), ("b", fake2.base_url))
    with running_gateway(cfg) as url:
        ups = {
            httpx.post(
                f"{url}/chat/completions",
                headers={"x-session-id": "conv-42"},
                json={"model": "smol", "messages": MESSAGES},
            ).headers["x-plumbline-upstream"]
            for _ in range(6)
        }
    assert len(ups) == 1


def test_completions_and_models(fake: FakeHandle) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        c = client(url)
        text = c.completions.create(model="smol", prompt="Once upon", max_tokens=4)
        models = c.models.list()
    assert text.choices[0].finish_reason == "length"
    assert [m.id for m in models.data] == ["smol"]
    assert "fake-model" not in str(models.model_dump())


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"model": "smol", "messages": "hi"}', 400, "messages"),
        (b'{"model": "smol", "messages": []}', 400, "messages"),
        (
            b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "does not exist",
        ),
        (
            b'{"model": "smol", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
            400,
            "max_tokens",
        ),
        (b'{"model": "smol", "messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
        (
            b'{"model": "smol", "messages": [{"role": "user", "content": "x"}],'
            b' "thinking_token_budget": true}',
            400,
            "thinking_token_budget",
        ),
        (b"[1, 2]", 400, "JSON object"),
        (b"", 400, "empty"),
        (b'{"model": "smol", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "JSON"),
    ],
)
def test_bad_input_gets_a_clear_openai_error(
    fake: FakeHandle, body: bytes, status: int, fragment: str
) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        r = httpx.post(
            f"{url}/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    assert r.status_code == status
    error = r.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert fake.requests() == []


def test_body_over_the_limit_is_413(fake: FakeHandle) -> None:
    cfg = gateway_config(("a", fake.base_url), max_body_bytes=4096)
    with running_gateway(cfg) as url:
        big = {"model": "smol", "messages": [{"role": "user", "content": "x" * 10000}]}
        r = httpx.post(f"{url}/chat/completions", json=big)
        chunked = httpx.post(
            f"{url}/chat/completions",
            content=iter([b'{"model": "smol", "messages": "', b"x" * 8000, b'"}']),
        )
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
    assert chunked.status_code == 413


def test_unknown_path_and_method_are_openai_errors(fake: FakeHandle) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        r = httpx.get(f"{url}/nope")
        m = httpx.get(f"{url}/chat/completions")
    assert r.status_code == 404 and "Unknown path" in r.json()["error"]["message"]
    assert m.status_code == 405 and "not allowed" in m.json()["error"]["message"]


def test_client_gone_cancels_a_non_streamed_upstream_call(fake: FakeHandle) -> None:
    """The upstream hangs; the client gives up. The gateway must drop the upstream request
    (an engine would otherwise generate for nobody), record a 499 and free the slot."""
    sink = ListSink()
    fake.set_default(hang_before_first_byte=30)
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{url}/chat/completions", timeout=0.5, json={"model": "smol", "messages": MESSAGES}
            )
        wait_for(lambda: len(sink.records) == 1)
        health = httpx.get(f"{url.removesuffix('/v1')}/health").json()
    [record] = sink.records
    assert record.status == 499 and record.error_class == "ClientDisconnected"
    assert [a.outcome for a in record.attempts] == ["cancelled"]
    assert health["upstreams"]["a"]["inflight"] == 0


def test_client_gone_mid_stream_is_recorded_and_frees_the_slot(fake: FakeHandle) -> None:
    """A client that walks away from a slow stream: the relay stops, the upstream request is
    closed, the record says 499 with the tokens relayed so far, the slot is free."""
    sink = ListSink()
    fake.set_default(tokens=400, pace_tps=40)
    body = {"model": "smol", "messages": MESSAGES, "stream": True}
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        with httpx.stream("POST", f"{url}/chat/completions", json=body) as r:
            lines = r.iter_lines()
            seen = [line for line, _ in zip(lines, range(8), strict=False) if line]
        wait_for(lambda: len(sink.records) == 1, timeout=10)
        health = httpx.get(f"{url.removesuffix('/v1')}/health").json()
    [record] = sink.records
    assert seen and all(line.startswith("data: {") for line in seen)
    assert record.status == 499 and record.error_class == "ClientDisconnected"
    assert 0 < record.chunks < 400
    assert health["upstreams"]["a"]["inflight"] == 0


def test_a_slow_client_gets_the_whole_stream_and_holds_back_its_upstream(
    fake: FakeHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reads far slower than the upstream writes: the gateway pauses reading
    from the upstream while the client's socket is full (no buffer grows without bound), and
    every token still arrives, in order, once the client reads."""
    import socket

    from gateway.serving.wire import Connection

    pauses: list[int] = []
    pause = Connection.pause

    def counted(self: Connection) -> None:
        pauses.append(1)
        pause(self)

    monkeypatch.setattr(Connection, "pause", counted)
    sink = ListSink()
    tokens = 20_000  # about 3 MB of events, far more than the socket buffers hold
    fake.set_default(tokens=tokens)
    body = b'{"model":"smol","messages":[{"role":"user","content":"hello"}],"stream":true}'
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            wait_for(lambda: pauses, timeout=20)  # the client has read nothing yet
            received = bytearray()
            while chunk := sock.recv(1 << 16):
                received += chunk
        wait_for(lambda: len(sink.records) == 1)
    text = bytes(received).decode()
    words = [w for w in re.findall(r'"content":"([^"]*)"', text) if w.strip()]
    assert [w.strip() for w in words] == [f"tok{i}" for i in range(tokens)]
    assert text.endswith("data: [DONE]\n\n\r\n0\r\n\r\n")  # the chunked body ends whole
    [record] = sink.records
    assert record.status == 200 and record.completion_tokens == tokens


def test_a_thinking_budget_is_checked_on_both_generation_doors(fake: FakeHandle) -> None:
    """vLLM's `thinking_token_budget`: an integer of at least -1 (unlimited), or a clear 400."""
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        for path, body in (
            ("/chat/completions", {"messages": MESSAGES}),
            ("/completions", {"prompt": "Once upon"}),
        ):
            bad = httpx.post(
                f"{url}{path}", json={"model": "smol", **body, "thinking_token_budget": "lots"}
            )
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "thinking_token_budget"
            good = httpx.post(
                f"{url}{path}", json={"model": "smol", **body, "thinking_token_budget": -1}
            )
            assert good.status_code == 200
    assert len(fake.requests()) == 2


def aliased(url: str, **route: Any) -> Any:
    base = gateway_config(("a", url))
    data = base.model_dump(exclude={"root"})
    data["models"]["smol"] |= {"aliases": ["gpt-5.5", "claude-haiku-4-5"], **route}
    data["upstreams"][0]["context_window"] = 4096
    return config_from(data)


def test_an_alias_is_its_route_on_every_door(fake: FakeHandle) -> None:
    import anthropic

    sink = ListSink()
    with running_gateway(aliased(fake.base_url), sinks=[sink]) as url:
        c = client(url)
        chat = c.chat.completions.create(model="gpt-5.5", messages=MESSAGES)
        streamed = list(c.chat.completions.create(model="gpt-5.5", messages=MESSAGES, stream=True))
        c.completions.create(model="gpt-5.5", prompt="Once upon", max_tokens=4)
        c.responses.create(model="gpt-5.5", input="hi")
        claude = anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key="unused", max_retries=0
        )
        claude.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=MESSAGES)
    assert chat.choices[0].finish_reason == "stop"
    assert chat.model == "gpt-5.5"  # the answer names the model as the client asked for it
    assert {chunk.model for chunk in streamed} == {"gpt-5.5"}
    # Records, metrics and routing name the route; the upstream is sent its own model id.
    assert [r.model for r in sink.records] == ["smol"] * 5
    assert [r.door for r in sink.records] == [
        "chat",
        "chat",
        "completions",
        "responses",
        "messages",
    ]
    assert {r["body"]["model"] for r in fake.requests()} == {"fake-model"}


def test_models_report_windows_and_aliases_and_resolve_by_id(fake: FakeHandle) -> None:
    with running_gateway(aliased(fake.base_url)) as url:
        c = client(url)
        listed = c.models.list().data
        one = c.models.retrieve("smol")
        by_alias = c.models.retrieve("claude-haiku-4-5")
        with pytest.raises(openai.NotFoundError) as missing:
            c.models.retrieve("claude-opus-9")
    assert [m.id for m in listed] == ["smol"]
    entry = listed[0].model_dump()
    assert entry["aliases"] == ["gpt-5.5", "claude-haiku-4-5"]
    # The served window: the smallest of the route's upstreams' (here its own 4096).
    assert entry["context_window"] == entry["max_model_len"] == 4096
    assert one.model_dump() == entry
    assert by_alias.id == "claude-haiku-4-5"
    assert by_alias.model_dump()["alias_of"] == "smol"
    assert by_alias.model_dump()["context_window"] == 4096
    error = missing.value.body
    assert isinstance(error, dict) and error["code"] == "model_not_found"
    assert "claude-opus-9" in error["message"]


def test_a_key_allowed_a_route_may_use_it_by_its_alias(fake: FakeHandle) -> None:
    from gateway.edge.access import hash_key

    data = aliased(fake.base_url).model_dump(exclude={"root"})
    data["models"]["other"] = {"upstreams": ["a"]}
    data["access"] = {"keys": [{"id": "k", "sha256": hash_key("sk-pl-k"), "models": ["smol"]}]}
    with running_gateway(config_from(data)) as url:
        c = openai.OpenAI(base_url=url, api_key="sk-pl-k", max_retries=0, timeout=30)
        c.chat.completions.create(model="gpt-5.5", messages=MESSAGES)
        with pytest.raises(openai.PermissionDeniedError):
            c.chat.completions.create(model="other", messages=MESSAGES)
