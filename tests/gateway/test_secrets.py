"""No secret leaves the gateway: a recognisable provider key and client key are planted, requests
(good and failing, incl. an upstream that echoes its Authorization header) are driven, and every
output is searched: response bodies and headers, logs, the server's stderr, records, /metrics,
/v1/models, /health and the admin key list."""

from __future__ import annotations

import base64
import json
import logging
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pytest

from gateway.edge.access import hash_key
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway import scripted
from tests.gateway.edge.test_access import ListSink, bearer, guarded_app, serving
from tests.gateway.scripted import scripted_upstream
from tests.harness import config_from, free_port, running_gateway

ENV = "PLUMBLINE_TEST_PROVIDER_KEY"


def test_planted_keys_appear_in_no_output(
    fake: FakeHandle,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    provider_key = "sk-PLANTEDPROV-" + os.urandom(12).hex()
    client_key = "pl-PLANTEDCLIENT-" + os.urandom(12).hex()
    admin_key = "pl-PLANTEDADMIN-" + os.urandom(12).hex()
    monkeypatch.setenv(ENV, provider_key)
    caplog.set_level(logging.DEBUG)
    config = config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 1},
            "upstreams": [
                {
                    "name": "prov",
                    "kind": "openai",
                    "base_url": fake.base_url,
                    "model": "fake-model",
                    "api_key_env": ENV,
                }
            ],
            "models": {"smol": {"upstreams": ["prov"]}},
            "access": {
                "keys": [
                    {"id": "alice", "sha256": hash_key(client_key)},
                    {"id": "ops", "sha256": hash_key(admin_key), "role": "admin"},
                ]
            },
        }
    )
    echo = f"Incorrect API key provided. Your header was: Authorization: Bearer {provider_key}"
    sink = ListSink()
    outputs: list[str] = []
    body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}

    def keep(resp: httpx.Response) -> httpx.Response:
        outputs.append(resp.text)
        outputs.append(repr(resp.headers.multi_items()))
        return resp

    with serving(guarded_app(config, [sink])) as root:
        c = httpx.Client(base_url=root, timeout=20, headers=bearer(client_key))
        post = c.post
        assert keep(post("/v1/chat/completions", json=body)).status_code == 200
        assert keep(post("/v1/chat/completions", json={**body, "stream": True})).status_code == 200
        fake.script({"status": 401, "message": echo})
        assert keep(post("/v1/chat/completions", json=body)).status_code == 502
        fake.script({"status": 400, "message": echo})
        assert keep(post("/v1/chat/completions", json=body)).status_code == 400
        fake.script(
            {"status": 500, "body": echo}, {"status": 503, "body": f"x-api-key={provider_key}"}
        )
        assert keep(post("/v1/chat/completions", json=body)).status_code == 502
        fake.script({"disconnect_after_chunks": 2})
        broken = keep(post("/v1/chat/completions", json={**body, "stream": True}))
        assert b'"error"' in broken.content
        keep(post("/v1/chat/completions", json={**body, "model": "nope"}))
        keep(post("/v1/chat/completions", content=b"{not json"))
        keep(c.post("/v1/chat/completions", json=body, headers=bearer(client_key + "x")))
        keep(c.post("/v1/chat/completions", json=body, headers={"x-api-key": provider_key}))
        for path in ("/v1/models", "/health", "/metrics"):
            assert keep(c.get(path)).status_code == 200
        assert keep(c.get("/admin/keys", headers=bearer(admin_key))).status_code == 200
        c.close()

    sent = [r["headers"].get("authorization") for r in fake.requests()]
    assert f"Bearer {provider_key}" in sent  # the planted key was really in play
    records = [orjson.dumps(r.as_row()).decode() for r in sink.records]
    assert {r.key_id for r in sink.records} == {"alice"}
    out, err = capfd.readouterr()
    haystacks = {
        "responses": "\n".join(outputs),
        "records": "\n".join(records),
        "logs": caplog.text,
        "stdout": out,
        "stderr": err,
    }
    assert "answered 401" in haystacks["responses"]  # the sanitised upstream error is there
    for where, text in haystacks.items():
        for secret in (provider_key, client_key, admin_key):
            marker = secret.split("-")[1]
            assert secret not in text, f"a planted key leaked into {where}"
            assert marker not in text, f"part of a planted key leaked into {where}"
            assert hash_key(secret) not in text, f"a key's hash leaked into {where}"


INTERNAL_KEY = "Zq9!hunter2-" + "7f3a91c2d4e5"


def test_internal_addresses_and_encoded_keys_appear_in_no_output(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The stress run's leaks, probed end to end: a refused connection, a host that does not
    resolve, an upstream 5xx whose text names internal hosts, addresses, its own base URL and
    the key URL-encoded, base64'd and JSON-escaped, and an error event mid-stream saying the
    same. The client's bodies and headers, the stored contents and the log name the upstreams
    by their configured names only."""
    monkeypatch.setenv(ENV, INTERNAL_KEY)
    caplog.set_level(logging.DEBUG)
    dead = free_port()
    with scripted_upstream() as up:
        port = up.url.rsplit(":", 1)[1]
        leaky = (
            f"backend {up.base_url}/chat/completions (via http://10.20.30.40:8000/v1) on "
            f"gpu-7.internal.corp:9000 [fd00::7]:8000 refused key "
            f"{quote(INTERNAL_KEY, safe='')} basic "
            f"{base64.b64encode(f'svc:{INTERNAL_KEY}'.encode()).decode()} json "
            f"{json.dumps(INTERNAL_KEY)[1:-1]}"
        )
        body = orjson.dumps({"error": {"message": leaky}})
        mid = b"data: " + orjson.dumps({"error": {"message": leaky, "code": 503}}) + b"\n\n"
        up.script(
            scripted.error(500, body),
            scripted.sse([scripted.chunk("Hello"), mid], "chunked"),
        )
        config = config_from(
            {
                "server": {
                    "health_interval_s": 0,
                    "retry_backoff_s": 0,
                    "retries": 0,
                    "connect_timeout_s": 2,
                },
                "store": {"url": f"sqlite:///{tmp_path / 'r.db'}", "store_content": True},
                "upstreams": [
                    {
                        "name": "leaky",
                        "kind": "openai",
                        "base_url": up.base_url,
                        "model": "m",
                        "api_key_env": ENV,
                    },
                    {
                        "name": "refused",
                        "kind": "vllm",
                        "base_url": f"http://127.0.0.1:{dead}/v1",
                        "model": "m",
                    },
                    {
                        "name": "unresolved",
                        "kind": "vllm",
                        "base_url": "http://secret-internal-host.corp.invalid:8497/v1",
                        "model": "m",
                    },
                ],
                "models": {"smol": {"upstreams": ["leaky"], "fallback": ["refused", "unresolved"]}},
            }
        )
        outputs: list[str] = []
        chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
        with running_gateway(config, record=True) as url:
            failed = httpx.post(f"{url}/chat/completions", json=chat, timeout=20)
            broken = httpx.post(
                f"{url}/chat/completions", json={**chat, "stream": True}, timeout=20
            )
        for resp in (failed, broken):
            outputs += [resp.text, repr(resp.headers.multi_items())]
    assert failed.status_code == 502
    message = failed.json()["error"]["message"]
    # Each upstream named, by its configured name, with what can be said of its failure.
    assert "leaky answered 500" in message and "refused key [redacted]" in message
    assert "cannot reach refused: cannot connect (ConnectionRefusedError)" in message
    assert "cannot reach unresolved" in message
    assert b'"error"' in broken.content and "upstream leaky:" in broken.text
    with sqlite3.connect(tmp_path / "r.db") as conn:
        stored = [" ".join(map(str, row)) for row in conn.execute("SELECT * FROM contents")]
    assert len(stored) == 2
    haystacks = {
        "responses": "\n".join(outputs),
        "contents": "\n".join(stored),
        "logs": caplog.text,
    }
    for where, text in haystacks.items():
        for leaked in (
            "hunter2",
            "Zq9",
            "10.20.30.40",
            "gpu-7",
            "internal.corp",
            "fd00",
            "secret-internal-host",
            "8497",
            f"127.0.0.1:{port}",
            f"127.0.0.1:{dead}",
            f":{port}/",
        ):
            assert leaked not in text, f"{leaked!r} leaked into {where}"
