"""The housekeeper: its interval from the config, retention at the first run and then hourly,
each run logged with its parts, the store's work on a thread of its own at a lower priority."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.config import Config
from gateway.edge.housekeeping import HOUSEKEEPING_NICE, Demotions, Housekeeper, lower_priority
from gateway.ledger.metrics import Metrics
from gateway.ledger.partitions import DAY
from gateway.ledger.record import Record
from gateway.ledger.rollup_sql import DIRTY
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
                # In housekeeping's thread; the child's own test turns it on.
                "upkeep_process": False,
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


def alive(pid: int) -> bool:
    """A process that runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def dirty(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(DIRTY)).scalar() or 0)


@pytest.mark.skipif(sys.platform != "linux", reason="reads the child's state in /proc")
def test_the_upkeep_runs_in_a_child_process_from_its_second_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With `store.upkeep_process`, the first upkeep run rolls up in housekeeping's thread; from
    the second on the rollups and retention run in a child process (its own GIL) at a lower
    priority. A child that died is replaced at the next run; stop ends it."""
    cfg = config(tmp_path, 60)
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"upkeep_process": True})})
    store = Store.from_config(cfg)
    now = time.time()
    store.write([row("hour", now - 3600)])
    keeper = Housekeeper(
        cfg, store, SharedGateBook(store), Demotions("g", Pool(cfg), store), Metrics(cfg)
    )
    caplog.set_level(logging.INFO, logger="plumbline")

    async def run() -> list[int]:
        pids = []
        await keeper.tick(hourly=False)
        assert keeper.upkeep_pid is None  # the first run: in the thread
        # A late record, in a bucket already rolled up: the next run rolls that bucket again.
        store.write([row("late", now - 3590)])
        assert dirty(store) == 1
        await keeper.tick(hourly=False)
        assert dirty(store) == 0
        pid = keeper.upkeep_pid
        assert pid is not None and pid != os.getpid() and alive(pid)
        me = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, me + HOUSEKEEPING_NICE)
        pids.append(pid)
        store.write([row("old", now - 5 * DAY)])
        await keeper.tick(hourly=True)  # retention, in the child
        assert store.get("old") is None and store.get("hour") is not None
        os.kill(pid, signal.SIGKILL)  # the child dies (as by the OOM killer)
        await keeper.tick(hourly=False)
        assert "store housekeeping failed" in caplog.text
        store.write([row("later", now - 3580)])
        await keeper.tick(hourly=False)  # a new child
        assert dirty(store) == 0
        assert keeper.upkeep_pid not in (None, pid)
        pids.append(keeper.upkeep_pid)
        await keeper.stop()
        return pids

    try:
        pids = asyncio.run(run())
    finally:
        store.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)
