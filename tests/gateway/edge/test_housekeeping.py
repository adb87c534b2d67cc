"""The housekeeper: its interval from the config, retention at the first run and then hourly,
each run logged with its parts, the store's work on a thread of its own at a lower priority."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from gateway.config import Config
from gateway.edge.housekeeping import HOUSEKEEPING_NICE, Demotions, Housekeeper, lower_priority
from gateway.ledger.metrics import Metrics
from gateway.ledger.partitions import DAY
from gateway.ledger.record import Record
from gateway.ledger.store import Store, record_row
from gateway.serving.pool import Pool
from gateway.trust.gate import SharedGateBook
from tests.gateway.ledger.test_metrics import samples


def config(tmp_path: Path, interval: float) -> Config:
    return Config.model_validate(
        {
            "upstreams": [
                {"name": "u", "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
            ],
            "models": {"m": {"upstreams": ["u"]}},
            "store": {
                "url": f"sqlite:///{tmp_path}/records.db",
                "retention_days": 2,
                "housekeeping_interval_s": interval,
            },
        }
    )


def row(request_id: str, t: float) -> dict[str, object]:
    return record_row(Record(request_id=request_id, door="chat", model="m", stream=False, time=t))


def test_runs_at_its_interval_and_retains_at_the_first_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path, 0.05)
    store = Store.from_config(cfg)
    now = time.time()
    store.write([row("old", now - 5 * DAY), row("new", now - 60)])
    keeper = Housekeeper(
        cfg, store, SharedGateBook(store), Demotions("g", Pool(cfg), store), Metrics(cfg)
    )

    async def run() -> None:
        keeper.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(runs(caplog)) < 3:
            await asyncio.sleep(0.05)
        await keeper.stop()

    caplog.set_level(logging.INFO, logger="plumbline")
    try:
        asyncio.run(run())
        assert store.get("old") is None and store.get("new") is not None
    finally:
        store.close()
    logged = runs(caplog)
    assert len(logged) >= 3
    assert "retention" in logged[0] and "rollups" in logged[0] and "economics" in logged[0]
    assert all("retention" not in line for line in logged[1:])  # once an hour


def test_publishes_the_economics_of_the_last_day_of_rolled_up_buckets(tmp_path: Path) -> None:
    """A run rolls up and publishes each model's $/M on its node from the settled window: the
    traffic of an hour ago is in it; the last minute's waits for its bucket to be rolled up."""
    cfg = Config.model_validate(
        {
            "upstreams": [
                {
                    "name": "u",
                    "kind": "vllm",
                    "base_url": "http://127.0.0.1:1/v1",
                    "model": "m",
                    "node": "box",
                }
            ],
            "models": {"m": {"upstreams": ["u"]}},
            "nodes": {"box": {"cost_per_hour": 3.6}},
            "store": {"url": f"sqlite:///{tmp_path}/records.db"},
        }
    )
    store = Store.from_config(cfg)
    now = time.time()

    def served(request_id: str, t: float, e2e_s: float = 10.0) -> dict[str, object]:
        record = Record(
            request_id=request_id,
            door="chat",
            model="m",
            stream=False,
            time=t,
            upstream="u",
            status=200,
            prompt_tokens=600,
            completion_tokens=400,
            e2e_s=e2e_s,
        )
        return record_row(record)

    store.write([served(f"hour-{i}", now - 3600 + 20 * i) for i in range(10)])
    metrics = Metrics(cfg)
    keeper = Housekeeper(
        cfg, store, SharedGateBook(store), Demotions("g", Pool(cfg), store), metrics
    )
    per_m = (
        "gateway_cost_per_million_tokens_usd",
        frozenset({"model": "m", "side": "node"}.items()),
    )
    try:
        asyncio.run(keeper.tick(hourly=False))
        # 10 requests of 10 s on a $3.60/h node: $0.10 for 10,000 tokens, $10 a million.
        assert samples(metrics)[per_m] == pytest.approx(10.0)
        store.write([served("just-now", now - 40, e2e_s=30.0)])  # $0.03 more: $11.82 a million
        asyncio.run(keeper.tick(hourly=False))
        assert samples(metrics)[per_m] == pytest.approx(10.0)  # not rolled up yet
    finally:
        store.close()


def runs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "housekeeping took" in r.getMessage()]


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_lower_priority_renices_only_the_calling_thread() -> None:
    me = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: list[int] = []

    def work() -> None:
        lower_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [min(19, me + HOUSEKEEPING_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == me
