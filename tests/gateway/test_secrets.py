"""No secret leaves the gateway: a recognisable provider key and client key are planted, requests
(good and failing, incl. an upstream that echoes its Authorization header) are driven, and every
output is searched: response bodies and headers, logs, the server's stderr, records, /metrics,
/v1/models, /health and the admin key list."""

from __future__ import annotations

import logging
import os

import httpx
import orjson
import pytest

from gateway.edge.access import hash_key
from gateway.fakes.upstream import FakeHandle
from tests.gateway.edge.test_access import ListSink, bearer, guarded_app, serving
from tests.harness import config_from

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
