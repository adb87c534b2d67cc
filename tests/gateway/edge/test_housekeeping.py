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
