"""The Responses door's state on the gateway's own store, through the real gateway, the real
`openai` client and the fake upstream: `store` (default true), `previous_response_id` (the stored
input and output go before the new input), `item_reference`, `GET` / `DELETE
/v1/responses/{id}`, `GET /v1/responses/{id}/input_items` (OpenAI's list page), per-key
isolation, `store: false`, and the retention's purge. (Through two gateways on PostgreSQL:
test_response_state_shared.py; with real SDKs: test_stateful_sdks.py.)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.edge.access import hash_key
from gateway.ledger.store import Store
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import config_from, running_gateway, wait_for

KEY_A, KEY_B = "key-a-plaintext", "key-b-plaintext"


def config(base_url: str, store: dict[str, Any], keys: bool = False) -> Any:
    access = {
        "keys": [
            {"id": "a", "sha256": hash_key(KEY_A)},
            {"id": "b", "sha256": hash_key(KEY_B)},
        ]
    }
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": base_url, "model": "fake-model"}
            ],
            "models": {"smol": {"upstreams": ["a"]}},
            "store": store,
            **({"access": access} if keys else {}),
        }
    )


@pytest.fixture
def db(tmp_path: Path) -> dict[str, Any]:
    return {"url": f"sqlite:///{tmp_path / 'records.db'}"}


@pytest.fixture
def gateway(fake: FakeHandle, db: dict[str, Any]) -> Iterator[str]:
    with running_gateway(config(fake.base_url, db), record=True) as url:
        yield url


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0)


def sent_messages(fake: FakeHandle) -> list[dict[str, Any]]:
    return fake.requests()[-1]["body"]["messages"]


def test_a_stored_response_is_continued_by_previous_response_id(
    gateway: str, fake: FakeHandle
) -> None:
    c = client(gateway)
    fake.script({"text": "Hello Ada."})
    first = c.responses.create(model="smol", input="I am Ada.", instructions="Be brief.")
    assert first.store is True
    got = c.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == "Hello Ada."
    fake.script({"text": "You are Ada."})
    second = c.responses.create(model="smol", input="Who am I?", previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.output_text == "You are Ada."
    # the earlier input and answer went first; its instructions were not carried over (OpenAI's)
    assert sent_messages(fake) == [
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "Who am I?"},
    ]


def test_a_streamed_response_is_stored_too(gateway: str, fake: FakeHandle) -> None:
    c = client(gateway)
    fake.script({"text": "streamed answer"})
    with c.responses.stream(model="smol", input="hi") as stream:
        final = stream.get_final_response()
    assert final.store is True
    assert c.responses.retrieve(final.id).output_text == "streamed answer"
    fake.script({"text": "ok"})
    c.responses.create(model="smol", input="and?", previous_response_id=final.id)
    assert [m["content"] for m in sent_messages(fake)] == ["hi", "streamed answer", "and?"]


def test_item_references_resolve_output_and_input_items(gateway: str, fake: FakeHandle) -> None:
    c = client(gateway)
    fake.script({"text": "Paris."})
    first = c.responses.create(model="smol", input="Capital of France?")
    said = first.output[-1].id
    asked = c.responses.input_items.list(first.id).data[0].id  # an id the gateway gave
    fake.script({"text": "ok"})
    c.responses.create(
        model="smol",
        input=[
            {"type": "item_reference", "id": asked},
            {"type": "item_reference", "id": said},
            {"role": "user", "content": "And Spain?"},
        ],
    )
    assert [m["content"] for m in sent_messages(fake)] == [
        "Capital of France?",
        "Paris.",
        "And Spain?",
    ]
    with pytest.raises(openai.NotFoundError, match="msg_nope"):
        c.responses.create(model="smol", input=[{"type": "item_reference", "id": "msg_nope"}])


def test_store_false_stores_nothing(gateway: str, fake: FakeHandle) -> None:
    c = client(gateway)
    fake.script({"text": "not kept"})
    gone = c.responses.create(model="smol", input="hi", store=False)
    assert gone.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(gone.id)
    with pytest.raises(openai.NotFoundError, match="Previous response"):
        c.responses.create(model="smol", input="again", previous_response_id=gone.id)


def test_delete_and_input_items_pages(gateway: str, fake: FakeHandle) -> None:
    c = client(gateway)
    fake.script({"text": "fine"})
    items = [{"role": "user", "content": f"line {i}"} for i in range(5)]
    r = c.responses.create(model="smol", input=items)  # type: ignore[arg-type]
    listed = c.responses.input_items.list(r.id, order="asc", limit=2)
    texts = [i.content[0].text for i in listed.data]  # type: ignore[union-attr]
    assert texts == ["line 0", "line 1"] and listed.has_more
    every = [i.id for i in c.responses.input_items.list(r.id, order="asc", limit=2)]
    assert len(every) == 5 == len(set(every))  # the client followed `after` to the end
    desc = c.responses.input_items.list(r.id, limit=100)
    assert [i.id for i in desc.data] == every[::-1] and not desc.has_more
    c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.delete(r.id)


def test_a_response_is_only_its_keys(fake: FakeHandle, db: dict[str, Any]) -> None:
    with running_gateway(config(fake.base_url, db, keys=True), record=True) as url:
        a, b = client(url, KEY_A), client(url, KEY_B)
        fake.script({"text": "secret"})
        mine = a.responses.create(model="smol", input="hi")
        assert a.responses.retrieve(mine.id).output_text == "secret"
        with pytest.raises(openai.NotFoundError):
            b.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.delete(mine.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.create(model="smol", input="x", previous_response_id=mine.id)
        ref = [{"type": "item_reference", "id": mine.output[0].id}]
        with pytest.raises(openai.NotFoundError):
            b.responses.create(model="smol", input=ref)  # type: ignore[arg-type]
        assert a.responses.retrieve(mine.id).id == mine.id  # still there for its key


def test_retention_purges_expired_responses(gateway: str, fake: FakeHandle, db: Any) -> None:
    c = client(gateway)
    fake.script({"text": "old"})
    r = c.responses.create(model="smol", input="hi")
    assert c.responses.retrieve(r.id).id == r.id  # the write (made off the answer's path) is in
    store = Store(db["url"])
    try:
        kept = store.apply_retention(
            30, 7, now=time.time() + 29 * 86400, responses_retention_days=30
        )
        assert kept["stored_responses"] == 0
        purged = store.apply_retention(
            30, 7, now=time.time() + 31 * 86400, responses_retention_days=30
        )
        assert purged["stored_responses"] == 1
    finally:
        store.close()
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)


def test_the_hourly_housekeeping_purges_expired_responses(fake: FakeHandle, db: Any) -> None:
    with running_gateway(config(fake.base_url, db), record=True) as url:
        fake.script({"text": "old"})
        r = client(url).responses.create(model="smol", input="hi")
        assert client(url).responses.retrieve(r.id).id == r.id
    short = {**db, "responses_retention_days": 1e-9}  # the housekeeper's first tick is hourly
    with running_gateway(config(fake.base_url, short), record=True) as url:

        def purged() -> bool:
            try:
                client(url).responses.retrieve(r.id)
            except openai.NotFoundError:
                return True
            return False

        wait_for(purged)


def test_no_key_is_stored(fake: FakeHandle, db: dict[str, Any]) -> None:
    with running_gateway(config(fake.base_url, db, keys=True), record=True) as url:
        fake.script({"text": "fine"})
        r = client(url, KEY_A).responses.create(model="smol", input="hi")
        assert client(url, KEY_A).responses.retrieve(r.id).id == r.id
    with sqlite3.connect(db["url"].removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT * FROM stored_responses").fetchall()
        rows += conn.execute("SELECT * FROM stored_items").fetchall()
    assert rows and KEY_A not in repr(rows) and hash_key(KEY_A) not in repr(rows)
    assert {row[1] for row in rows[:1]} == {"a"}  # the key's id, never the key


def test_without_a_store_references_are_refused(fake: FakeHandle) -> None:
    with running_gateway(config(fake.base_url, {"enabled": False})) as url:
        c = client(url)
        fake.script({"text": "fine"})
        r = c.responses.create(model="smol", input="hi")
        assert r.store is False  # nothing to keep it in: said so, not pretended
        with pytest.raises(openai.BadRequestError, match="keeps no store"):
            c.responses.create(model="smol", input="x", previous_response_id=r.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(r.id)
