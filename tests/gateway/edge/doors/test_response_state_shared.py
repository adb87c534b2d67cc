"""Stored state is the store's, not one gateway's: two gateways on one PostgreSQL store, a
response stored through one is read (`GET`, `input_items`) and continued
(`previous_response_id`, `item_reference`) through the other, and so is a Messages thread.
Plus the Messages door's thread refusals the Anthropic SDK recovers from.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from gateway.edge.access import hash_key
from gateway.ledger import responses_store
from gateway.ledger.store import Store
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway import pg
from tests.harness import config_from, running_gateway


def config(base_url: str, store: dict[str, Any]) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": base_url, "model": "fake-model"}
            ],
            "models": {"smol": {"upstreams": ["a"]}},
            "store": store,
        }
    )


def settled(url: str, rid: str) -> None:
    """Wait until another gateway's write of `rid` has committed (it is made off the answer's
    path; the gateway that wrote it waits for its own writes itself)."""
    store = Store(url)
    try:
        deadline = time.monotonic() + 10
        while responses_store.load(store.engine, rid, "") is None:
            assert time.monotonic() < deadline, f"{rid} was never stored"
            time.sleep(0.02)
    finally:
        store.close()


def test_two_gateways_on_postgresql_share_stored_responses(fake: FakeHandle, pg_admin: str) -> None:
    url = pg.fresh_database(pg_admin)
    cfg = config(fake.base_url, {"url": url})
    with running_gateway(cfg, record=True) as one, running_gateway(cfg, record=True) as two:
        a = openai.OpenAI(base_url=one, api_key="none", max_retries=0)
        b = openai.OpenAI(base_url=two, api_key="none", max_retries=0)
        fake.script({"text": "Hello Ada."})
        first = a.responses.create(model="smol", input="I am Ada.")
        settled(url, first.id)
        assert b.responses.retrieve(first.id).output_text == "Hello Ada."
        assert [i.id for i in b.responses.input_items.list(first.id)] == [
            i.id for i in a.responses.input_items.list(first.id)
        ]
        fake.script({"text": "You are Ada."})
        second = b.responses.create(model="smol", input="Who?", previous_response_id=first.id)
        assert [m["content"] for m in fake.requests()[-1]["body"]["messages"]] == [
            "I am Ada.",
            "Hello Ada.",
            "Who?",
        ]
        settled(url, second.id)
        fake.script({"text": "ok"})
        ref = [{"type": "item_reference", "id": second.output[0].id}]
        a.responses.create(model="smol", input=ref)  # type: ignore[arg-type]
        assert fake.requests()[-1]["body"]["messages"] == [
            {"role": "assistant", "content": "You are Ada."}
        ]


def thread_turn(url: str, key: str = "none", **body: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/messages",
        json={"model": "smol", "max_tokens": 64, **body},
        headers={"anthropic-beta": "message-threads-2026-08-12", "x-api-key": key},
        timeout=10,
    )


def test_a_messages_thread_continues_through_another_gateway(
    fake: FakeHandle, pg_admin: str
) -> None:
    url = pg.fresh_database(pg_admin)
    cfg = config(fake.base_url, {"url": url})
    with running_gateway(cfg, record=True) as one, running_gateway(cfg, record=True) as two:
        fake.script({"text": "Noted."})
        hi = [{"role": "user", "content": "My name is Ada."}]
        first = thread_turn(one, system="Be brief.", messages=hi, thread={"type": "create"})
        assert first.status_code == 200, first.text
        assert "x-plumbline-dropped" not in first.headers
        mid = first.json()["id"]
        settled(url, mid)
        fake.script({"text": "Ada."})
        cont = {"type": "continue", "previous_message_id": mid}
        ask = [{"role": "user", "content": "Name?"}]
        assert thread_turn(two, messages=ask, thread=cont).status_code == 200
        assert fake.requests()[-1]["body"]["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Name?"},
        ]


def test_thread_refusals_carry_the_sdks_error_codes(fake: FakeHandle, tmp_path: Path) -> None:
    ask = [{"role": "user", "content": "hi"}]
    db = {"url": f"sqlite:///{tmp_path / 'r.db'}"}
    with running_gateway(config(fake.base_url, db), record=True) as url:
        lost = {"type": "continue", "previous_message_id": "msg_gone"}
        r = thread_turn(url, messages=ask, thread=lost)
        assert r.status_code == 404
        assert r.json()["error"]["details"]["error_code"] == "thread_not_found"
    with running_gateway(config(fake.base_url, {"enabled": False})) as url:
        r = thread_turn(url, messages=ask, thread={"type": "create"})
        assert r.status_code == 400
        assert r.json()["error"]["details"]["error_code"] == "thread_unsupported_request"
        # and the SDK's tool runner goes on without a thread: the whole history each turn
        fake.script({"text": "fine"})
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="x", max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="smol", max_tokens=64, tools=[], messages=ask
        )
        replies = list(runner)
        assert [b.text for b in replies[-1].content if b.type == "text"] == ["fine"]


def test_a_thread_is_only_its_keys(fake: FakeHandle, tmp_path: Path) -> None:
    keys = [{"id": "a", "sha256": hash_key("key-a")}, {"id": "b", "sha256": hash_key("key-b")}]
    cfg = config(fake.base_url, {"url": f"sqlite:///{tmp_path / 'r.db'}"})
    cfg = cfg.model_copy(update={"access": config_from({"access": {"keys": keys}}).access})
    with running_gateway(cfg, record=True) as url:
        fake.script({"text": "Noted."})
        hi = [{"role": "user", "content": "hi"}]
        first = thread_turn(url, "key-a", messages=hi, thread={"type": "create"})
        cont = {"type": "continue", "previous_message_id": first.json()["id"]}
        other = thread_turn(url, "key-b", messages=hi, thread=cont)
        assert other.status_code == 404
        assert other.json()["error"]["details"]["error_code"] == "thread_not_found"
        fake.script({"text": "again"})
        assert thread_turn(url, "key-a", messages=hi, thread=cont).status_code == 200
