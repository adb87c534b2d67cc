"""No request poisons the ledger: odd values are coerced into their columns and named; a row
the store still refuses is quarantined alone with its reason; a spool replay always makes
progress; `/health` and the metrics say what waits and what was set aside."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import Config
from gateway.edge.app import create_app
from gateway.ledger.quarantine import held, quarantined, write_sorted
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store, record_row
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway import pg
from tests.gateway.ledger.test_store import full_record
from tests.harness import config_from, serving_app, wait_for

ODD = [[], {}, {"a": 1}, 10**30, -(10**30), "64", "many", 1.5, True, None]


def _raw_row(request_id: str, **values: Any) -> dict[str, Any]:
    """A row as an older gateway spooled it: raw values, never coerced."""
    row = record_row(full_record(request_id))
    row.update(values)
    return row


def test_odd_values_are_stored_coerced_and_named(store: Store) -> None:
    records = []
    for i, odd in enumerate(ODD):
        r = full_record(f"odd{i}", max_tokens=odd, finish_reason=odd, provider=odd)  # type: ignore[arg-type]
        r.ttft_s = float("nan")
        r.model = "m" * 500
        records.append(r)
    store.write([record_row(r) for r in records])
    assert store.count() == len(ODD)
    got = store.get("odd0")
    assert got is not None
    assert got["max_tokens"] is None and got["finish_reason"] is None and got["ttft_s"] is None
    assert len(got["model"]) == 128
    assert (
        got["coerced"] == "model:long,provider:list,finish_reason:list,max_tokens:list,ttft_s:nan"
    )
    huge = store.get("odd3")
    assert huge is not None and huge["max_tokens"] == 2**31 - 1
    assert "max_tokens:huge" in huge["coerced"]


def test_a_refused_row_is_quarantined_alone_with_its_reason(store: Store) -> None:
    rows = [_raw_row(f"ok{i}") for i in range(40)]
    rows.insert(17, _raw_row("poison", max_tokens=[]))
    done = write_sorted(store, rows, [])
    assert (done.rows, done.quarantined) == (40, 1)
    assert store.count() == 40 and store.get("poison") is None
    [kept] = held(store)
    assert kept["request_id"] == "poison" and kept["row"]["max_tokens"] == []
    assert kept["reason"]  # the database's own words: "Error binding parameter" / "cannot adapt"
    assert quarantined(store) == 1


def test_a_spool_with_a_refused_row_replays_every_other_row(store: Store, tmp_path: Path) -> None:
    """The defect: every replay failed on the same row, so no row after it ever reached the
    store. Now the replay quarantines it and goes on, and later records flow."""
    spool = tmp_path / "spool"
    spool.mkdir()
    lines = [{"requests": _raw_row(f"s{i}")} for i in range(30)]
    lines.insert(3, {"requests": _raw_row("poison", max_tokens={"a": 1})})
    (spool / "spool.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    q = RecordQueue(store, spool, flush_interval_s=0.01, batch_size=8)
    try:
        assert _wait(lambda: store.count() == 30)
        assert _wait(lambda: not (spool / "spool.jsonl").exists() and not q._spool_dirty)
        for i in range(10):
            q.submit(full_record(f"after{i}"))
        assert q.flush()
        assert store.count() == 40
    finally:
        q.close()
    assert q.stats.quarantined == 1 and q.stats.replayed == 30
    assert [r["request_id"] for r in held(store)] == ["poison"]


def _wait(predicate: Any, timeout: float = 30.0) -> bool:
    try:
        wait_for(predicate, timeout)
    except AssertionError:
        return False
    return True


def _gateway_config(base_url: str, store_url: str) -> Config:
    return config_from(
        {
            "server": {"health_interval_s": 0},
            "store": {"url": store_url},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": base_url, "model": "m"}],
            "models": {"smol": {"upstreams": ["a"]}},
        }
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_one_odd_request_among_a_thousand_gives_1001_records(
    backend: str, fake: FakeHandle, request: pytest.FixtureRequest
) -> None:
    """The stress run's probe: `"max_tokens": []` on /v1/embeddings answered 200 and its record
    held back every later one. Now each of the 1,001 requests is a row, the odd one's cap
    NULL and named in `coerced`."""
    url = "sqlite:///var/plumbline.db"
    if backend == "postgresql":
        url = pg.fresh_database(request.getfixturevalue("pg_admin"))
    config = _gateway_config(fake.base_url, url)
    app = create_app(config)
    body = {"model": "smol", "input": "hello"}
    with serving_app(app) as root, httpx.Client(base_url=root, timeout=30) as client:
        ids = []
        for i in range(1001):
            odd = {"max_tokens": []} if i == 500 else {}
            resp = client.post("/v1/embeddings", json={**body, **odd})
            assert resp.status_code == 200, resp.text
            ids.append(resp.headers["x-plumbline-request-id"])
        gw = app.state.gateway
        assert gw.queue.flush()
        store: Store = gw.store
        assert store.count() == 1001
        odd_row = store.get(ids[500])
        assert odd_row is not None
        assert odd_row["max_tokens"] is None and odd_row["coerced"] == "max_tokens:list"
        assert store.get(ids[1000]) is not None
        assert quarantined(store) == 0
        health = client.get("/health").json()["ledger"]
        assert health["spooled_rows"] == 0 and health["quarantined_rows"] == 0


def test_health_and_metrics_count_quarantined_and_spooled_rows(fake: FakeHandle) -> None:
    """A spool an older gateway left, with a row no store takes: at start it is replayed, the
    row quarantined, and /health and /metrics say so while requests keep being recorded."""
    config = _gateway_config(fake.base_url, "sqlite:///var/plumbline.db")
    spool = config.root / "var" / "spool"
    spool.mkdir(parents=True)
    lines = [{"requests": _raw_row(f"old{i}")} for i in range(5)]
    lines.append({"requests": _raw_row("poison", max_tokens=[], time=time.time())})
    (spool / "spool.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    app = create_app(config)
    with serving_app(app) as root, httpx.Client(base_url=root, timeout=30) as client:
        gw = app.state.gateway
        wait_for(lambda: client.get("/health").json()["ledger"]["quarantined_rows"] == 1, 30)
        ledger = client.get("/health").json()["ledger"]
        assert ledger["spooled_rows"] == 0
        metrics = client.get("/metrics").text
        assert "gateway_ledger_quarantined_rows 1.0" in metrics
        assert "gateway_ledger_spooled_rows 0.0" in metrics
        resp = client.post("/v1/embeddings", json={"model": "smol", "input": "x"})
        assert resp.status_code == 200
        assert gw.queue.flush()
        assert gw.store.count() == 6
        [kept] = held(gw.store)
        assert kept["request_id"] == "poison" and "list" in kept["reason"]


def test_stream_is_read_as_validated_and_the_upstream_is_sent_a_boolean(
    fake: FakeHandle,
) -> None:
    """`"stream": "false"` passes the doors' validation as false: the client gets a whole
    answer, the record says not streamed, the upstream is sent `false` (not the string)."""
    app = create_app(_gateway_config(fake.base_url, "sqlite:///var/plumbline.db"))
    chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with serving_app(app) as root, httpx.Client(base_url=root, timeout=30) as client:
        for sent, streamed in (("false", False), ("true", True), (0, False), ("1", True)):
            resp = client.post("/v1/chat/completions", json={**chat, "stream": sent})
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith(
                "text/event-stream" if streamed else "application/json"
            )
            assert fake.requests()[-1]["body"]["stream"] is streamed
            gw = app.state.gateway
            assert gw.queue.flush()
            row = gw.store.get(resp.headers["x-plumbline-request-id"])
            assert row is not None and row["stream"] is streamed and row["coerced"] is None
