"""Leases (`gateway.ledger.lease`) on SQLite and PostgreSQL, and the housekeeping that uses one:
of several processes on a store, one does the store's upkeep."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gateway.edge.housekeeping import UPKEEP_LEASE, UPKEEP_TTL_S, Demotions, Housekeeper
from gateway.ledger import lease
from gateway.ledger.metrics import Metrics
from gateway.ledger.store import Store, record_row
from gateway.serving.pool import Pool
from gateway.trust.gate import GateBook
from tests.gateway.ledger.test_rollups import T0, config
from tests.gateway.ledger.test_store import full_record


def test_a_lease_is_one_holders_until_it_lapses(store: Store) -> None:
    e = store.engine
    assert lease.holder(e, "upkeep", T0) is None
    assert lease.hold(e, "upkeep", "a", T0, 100)
    assert not lease.hold(e, "upkeep", "b", T0 + 50, 100)  # a holds it
    assert lease.hold(e, "upkeep", "a", T0 + 90, 100)  # a extends it to T0 + 190
    assert not lease.hold(e, "upkeep", "b", T0 + 150, 100)
    assert lease.holder(e, "upkeep", T0 + 150) == "a"
    assert lease.holder(e, "upkeep", T0 + 191) is None  # a is gone: lapsed
    assert lease.hold(e, "upkeep", "b", T0 + 191, 100)
    assert not lease.hold(e, "upkeep", "a", T0 + 200, 100)
    assert lease.hold(e, "other", "a", T0 + 200, 100)  # leases are by name
    lease.release(e, "upkeep", "a")  # not a's: nothing happens
    assert lease.holder(e, "upkeep", T0 + 200) == "b"
    lease.release(e, "upkeep", "b")
    assert lease.hold(e, "upkeep", "a", T0 + 201, 100)


def test_of_many_asking_at_once_exactly_one_gets_a_free_lease(store: Store) -> None:
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: lease.hold(store.engine, "x", f"p{i}", T0, 60), range(8)))
    assert got.count(True) == 1
    assert lease.holder(store.engine, "x", T0) == f"p{got.index(True)}"


class Counting(Store):
    """A store that counts its upkeep calls (the work is the real store's)."""

    def __init__(self, url: str, root: Path) -> None:
        super().__init__(url, root=root)
        self.calls: list[str] = []

    def roll_up(self, *a: object, **kw: object) -> int:
        self.calls.append("roll_up")
        return super().roll_up(*a, **kw)  # type: ignore[arg-type]

    def apply_retention(self, *a: object, **kw: object) -> dict[str, int]:
        self.calls.append("retention")
        return super().apply_retention(*a, **kw)  # type: ignore[arg-type]


def test_of_two_processes_on_a_store_one_does_the_upkeep(tmp_path: Path) -> None:
    """Two housekeepers (two workers) on one store: both publish economics each tick, one rolls
    up and applies retention; when it stops ticking, the other takes the upkeep over."""
    cfg = config()  # the upkeep in housekeeping's thread, where `Counting` sees it
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"upkeep_process": False})})
    stores = [Counting("sqlite:///var/records.db", tmp_path) for _ in range(2)]
    stores[0].write([record_row(full_record("r1", T0, upstream="a"))])
    keepers = [
        Housekeeper(
            cfg,
            s,
            GateBook(tmp_path / f"gate{i}.json"),
            Demotions(f"g{i}", Pool(cfg), s),
            Metrics(cfg),
            holder=f"g{i}",
        )
        for i, s in enumerate(stores)
    ]

    async def ticks(n: int, who: list[Housekeeper]) -> None:
        for _ in range(n):
            for k in who:
                await k.tick()

    asyncio.run(ticks(3, keepers))
    first, second = stores
    assert first.calls == ["roll_up", "retention", "roll_up", "roll_up"]
    assert second.calls == []
    assert keepers[0].upkeep_ticks == 3 and keepers[1].upkeep_ticks == 0
    # g0 stops; once its lease has lapsed, g1 holds it and does the upkeep.
    lease.hold(first.engine, UPKEEP_LEASE, "g0", T0, 0)  # as if its last tick were long ago
    assert lease.holder(first.engine, UPKEEP_LEASE, T0 + UPKEEP_TTL_S) is None
    asyncio.run(ticks(1, keepers[1:]))
    assert second.calls == ["roll_up", "retention"]
    # A clean stop gives the lease up: the next process takes it over at its next tick.
    asyncio.run(keepers[1].stop())
    assert lease.holder(first.engine, UPKEEP_LEASE, T0 + UPKEEP_TTL_S) is None
    asyncio.run(ticks(1, keepers[:1]))
    assert first.calls == ["roll_up", "retention", "roll_up", "roll_up", "roll_up"]
    for s in stores:
        s.close()
