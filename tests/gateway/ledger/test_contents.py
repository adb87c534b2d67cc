"""`[store] store_content`: each request's prompt and response in the `contents` table, end to end
with the real `openai` and `anthropic` clients -> gateway -> fake upstream -> SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.errors import ConfigError
from gateway.ledger.record import Record
from gateway.ledger.store import Store, capped
from gateway.trust.capture import Capture, ContentKeeper, StoredContent, TextSampler
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.test_api import gateway_config
from tests.harness import config_from, running_gateway

KEY = "sk-plumbline-test-key-never-stored"
HI = [{"role": "user", "content": "hello there"}]


def _config(fake: FakeHandle, db: Path, **store: Any) -> Any:
    data = gateway_config(("a", fake.base_url)).model_dump(exclude_none=True)
    data["store"] = {"url": f"sqlite:///{db}", **store}
    return config_from(data)


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=30)


def _table(db: Path, table: str) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return {r["request_id"]: dict(r) for r in conn.execute(f"SELECT * FROM {table}")}


def test_every_door_and_shape_keeps_its_prompt_and_response(
    fake: FakeHandle, tmp_path: Path
) -> None:
    db = tmp_path / "c.db"
    ids: dict[str, str] = {}
    fake.set_default(tokens=6)
    with running_gateway(_config(fake, db, store_content=True), record=True) as url:
        c = _client(url)
        raw = c.chat.completions.with_raw_response.create(model="smol", messages=HI, seed=3)
        ids["whole"] = raw.headers["x-plumbline-request-id"]
        whole_body = raw.http_response.text

        fake.script({"reasoning_field": "reasoning_content", "reasoning_tokens": 3, "tokens": 4})
        raw_stream = c.chat.completions.with_raw_response.create(
            model="smol", messages=HI, stream=True
        )
        ids["stream"] = raw_stream.headers["x-plumbline-request-id"]
        streamed, reasoning = "", ""
        for chunk in raw_stream.parse():
            for choice in chunk.choices:
                streamed += choice.delta.content or ""
                reasoning += getattr(choice.delta, "reasoning_content", None) or ""

        raw_comp = c.completions.with_raw_response.create(
            model="smol", prompt="once upon", stream=True, max_tokens=5
        )
        ids["completions"] = raw_comp.headers["x-plumbline-request-id"]
        completed = "".join(ch.choices[0].text for ch in raw_comp.parse() if ch.choices)

        root = url.removesuffix("/v1")
        claude = anthropic.Anthropic(base_url=root, api_key=KEY, max_retries=0, timeout=30)
        raw_msg = claude.messages.with_raw_response.create(
            model="smol", max_tokens=50, messages=[{"role": "user", "content": "hi claude"}]
        )
        ids["messages"] = raw_msg.headers["x-plumbline-request-id"]
        message_body = raw_msg.http_response.text

        fake.set_default(status=500)
        with pytest.raises(openai.APIStatusError) as failed:
            c.chat.completions.create(model="smol", messages=HI)
        ids["error"] = failed.value.response.headers.get("x-plumbline-request-id", "")
        error_body = failed.value.response.text

    contents, requests = _table(db, "contents"), _table(db, "requests")
    assert len(contents) == len(requests) == 5
    for rid, row in contents.items():  # each joins its record
        assert requests[rid]["time"] == row["time"]
        assert KEY not in row["prompt"] and KEY not in (row["response"] or "")

    whole = contents[ids["whole"]]
    assert json.loads(whole["prompt"]) == {"model": "smol", "messages": HI, "seed": 3}
    assert whole["response"] == whole_body  # the body as sent

    stream = contents[ids["stream"]]
    assert json.loads(stream["prompt"])["stream"] is True
    answer = json.loads(stream["response"])
    assert streamed and answer["content"] == streamed
    assert reasoning and answer["reasoning"] == reasoning
    assert answer["finish_reason"] == "stop" and "truncated" not in answer

    comp = contents[ids["completions"]]
    assert json.loads(comp["prompt"])["prompt"] == "once upon"
    assert completed and json.loads(comp["response"])["content"] == completed

    msg = contents[ids["messages"]]
    assert json.loads(msg["prompt"])["messages"] == [{"role": "user", "content": "hi claude"}]
    assert msg["response"] == message_body and json.loads(message_body)["type"] == "message"

    # The error's id is not on its error body's headers: find the one failed record.
    (error_id,) = [r for r, row in requests.items() if row["status"] >= 500]
    assert ids["error"] in ("", error_id)
    error = contents[error_id]
    assert json.loads(error["prompt"])["messages"] == HI
    assert json.loads(error["response"]) == json.loads(error_body)


def test_store_content_off_keeps_no_content(fake: FakeHandle, tmp_path: Path) -> None:
    db = tmp_path / "off.db"
    with running_gateway(_config(fake, db), record=True) as url:
        c = _client(url)
        c.chat.completions.create(model="smol", messages=HI)
        list(c.chat.completions.create(model="smol", messages=HI, stream=True))
    assert len(_table(db, "requests")) == 2
    assert _table(db, "contents") == {}


def test_fields_are_capped_and_marked(fake: FakeHandle, tmp_path: Path) -> None:
    db = tmp_path / "cap.db"
    long_prompt = "é" * 1500  # 3000 bytes of UTF-8
    fake.set_default(tokens=600)  # "tok0 tok1 ...": about 3.9 kB of text
    cfg = _config(fake, db, store_content=True, content_max_bytes=1024)
    with running_gateway(cfg, record=True) as url:
        c = _client(url)
        c.chat.completions.create(model="smol", messages=[{"role": "user", "content": long_prompt}])
        list(c.chat.completions.create(model="smol", messages=HI, stream=True))
    rows = sorted(_table(db, "contents").values(), key=lambda r: r["time"])
    assert len(rows) == 2
    for text in (rows[0]["prompt"], rows[0]["response"], rows[1]["response"]):
        head, _, mark = text.rpartition("\n[plumbline: truncated at 1024 of ")
        assert head and mark.endswith(" bytes]"), text[-80:]
        assert len(head.encode()) <= 1024 and int(mark.split()[0]) > 1024
    assert json.loads(rows[1]["prompt"])["messages"] == HI  # short: kept whole
    assert rows[0]["prompt"].startswith('{"model":"smol"')
    assert rows[1]["response"].startswith('{"content":"tok0 tok1')


def test_content_max_bytes_is_validated() -> None:
    with pytest.raises(ConfigError, match="content_max_bytes"):
        config_from({"store": {"content_max_bytes": 10}})


def test_capped_cuts_whole_characters() -> None:
    assert capped(None, 1024) is None
    assert capped(b"short", 1024) == "short"
    cut = capped("ab" + "é" * 10, 5)
    assert cut == "abé\n[plumbline: truncated at 5 of 22 bytes]"  # the cut "é" left out


def test_contents_go_with_their_retention(fake: FakeHandle, tmp_path: Path) -> None:
    db = tmp_path / "keep.db"
    cfg = _config(fake, db, store_content=True, content_retention_days=7, retention_days=30)
    with running_gateway(cfg, record=True) as url:
        _client(url).chat.completions.create(model="smol", messages=HI)
    (row,) = _table(db, "contents").values()
    store = Store(f"sqlite:///{db}")
    try:
        assert store.apply_retention(30, 7, now=row["time"] + 6 * 86400)["contents"] == 0
        assert len(_table(db, "contents")) == 1
        dropped = store.apply_retention(30, 7, now=row["time"] + 8 * 86400 + 1)
    finally:
        store.close()
    assert dropped["contents"] >= 1 and dropped["requests"] == 0
    assert _table(db, "contents") == {} and len(_table(db, "requests")) == 1


def test_responses_and_messages_streams_keep_their_answer(fake: FakeHandle, tmp_path: Path) -> None:
    db = tmp_path / "doors.db"
    fake.set_default(tokens=5)
    with running_gateway(_config(fake, db, store_content=True), record=True) as url:
        c = _client(url)
        raw = c.responses.with_raw_response.create(model="smol", input="say hi")
        whole_id, whole_body = raw.headers["x-plumbline-request-id"], raw.http_response.text
        events = list(c.responses.create(model="smol", input="stream hi", stream=True))
        (done,) = [e for e in events if e.type == "response.completed"]
        claude = anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=30
        )
        with claude.messages.stream(
            model="smol", max_tokens=50, messages=[{"role": "user", "content": "stream claude"}]
        ) as stream:
            claude_text = "".join(stream.text_stream)
    rows = _table(db, "contents")
    assert len(rows) == 3 and set(rows) == set(_table(db, "requests"))
    assert rows[whole_id]["response"] == whole_body
    assert json.loads(rows[whole_id]["prompt"]) == {"model": "smol", "input": "say hi"}
    by_prompt = {json.loads(r["prompt"]).get("input", "messages"): r for r in rows.values()}
    streamed = json.loads(by_prompt["stream hi"]["response"])
    assert streamed["content"] == done.response.output_text and streamed["finish_reason"]
    (claude_row,) = [r for r in rows.values() if "stream claude" in r["prompt"]]
    assert claude_text and json.loads(claude_row["response"])["content"] == claude_text


def test_a_content_capture_is_not_a_sample() -> None:
    """Every request is captured for the store, but only the sampled ones count as sampled (the
    watchdog's degeneration share reads that flag), and they check only `sample_chars`."""
    kept: list[StoredContent] = []
    keeper = ContentKeeper(kept.append, max_bytes=4096)
    sampler = TextSampler(0.0, max_chars=16, content=keeper)
    record = Record(request_id="r1", door="chat", model="m", stream=True)
    capture = sampler.start(record, {"model": "m"}, prompt=b'{"model":"m"}')
    assert capture is not None
    capture.delta(0, {"content": "word " * 100})
    capture.finish()
    assert not record.sampled and not record.degenerate
    (row,) = [k.as_row() for k in kept]
    assert row["prompt"] == '{"model":"m"}' and row["request_id"] == "r1"
    assert json.loads(row["response"])["content"] == "word " * 100

    sampled = Capture(record, None, keep_text=True, max_chars=16, content=keeper)
    sampled.delta(0, {"content": "word " * 100})
    assert sampled.answer == ("word " * 100)[:16]  # the check reads what a sample keeps


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_a_stream_keeps_its_tool_calls_and_its_break(fake: FakeHandle, tmp_path: Path) -> None:
    db = tmp_path / "tools.db"
    with running_gateway(_config(fake, db, store_content=True), record=True) as url:
        c = _client(url)
        fake.script({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})
        list(c.chat.completions.create(model="smol", messages=HI, tools=[WEATHER], stream=True))
        fake.script({"realistic": True, "tokens": 40, "disconnect_after_chunks": 6})
        with pytest.raises(openai.APIError):
            list(c.chat.completions.create(model="smol", messages=HI, stream=True))
    rows = sorted(_table(db, "contents").values(), key=lambda r: r["time"])
    requests = _table(db, "requests")
    assert len(rows) == 2
    tools = json.loads(rows[0]["response"])
    assert tools["tool_calls"] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert tools["finish_reason"] == "tool_calls"
    broken = json.loads(rows[1]["response"])
    failed = requests[rows[1]["request_id"]]
    assert broken["content"] and broken["error"]["class"] == failed["error_class"]
