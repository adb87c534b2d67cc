"""Retention with rollups kept past the rows (`[store] rollup_retention_days`): the reports over
the dropped days read what they read before, rows go only once rolled up, and a late record for
a dropped day leaves its buckets' rollups as they were. SQLite and PostgreSQL alike."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from gateway.config import Config
from gateway.config.server import StoreConfig
from gateway.ledger.partitions import DAY
from gateway.ledger.rollup_sql import DIRTY, TABLES
from gateway.ledger.rollups import HOUR, SETTLE_S, raw_floor
from gateway.ledger.rows import REQUESTS
from gateway.ledger.store import Store, record_row
from gateway.reports.cost import report_cost
from tests.gateway.ledger.test_rollups import T0, config, fill, same_usage
from tests.gateway.ledger.test_store import full_record

END = T0 + 3 * DAY  # three days of rows


def _rows_before(store: Store, t: float) -> int:
    q = sa.select(sa.func.count()).select_from(REQUESTS).where(REQUESTS.c.time < t)
    with store.engine.connect() as conn:
        return int(conn.execute(q).scalar() or 0)


def _answers(store: Store, cfg: Config) -> tuple[object, ...]:
    """The three days' usage and node hours, and the cost report over them."""
    return (
        store.usage(T0, END),
        store.usage(T0 + 1200.0, T0 + 50 * HOUR + 77.0),  # a ragged end in the rows kept
        store.node_hours(cfg, T0, END),
        report_cost(cfg, "3d", "json", store=store, now=END),
    )


def _same(got: tuple[object, ...], want: tuple[object, ...]) -> None:
    same_usage(got[0], want[0])  # type: ignore[arg-type]
    same_usage(got[1], want[1])  # type: ignore[arg-type]
    assert got[2] == pytest.approx(want[2], rel=1e-9)
    assert got[3] == want[3]


def _filled(store: Store) -> Config:
    cfg = config()
    fill(store, 72, 1500)
    assert store.roll_up(cfg, END + SETTLE_S, max_hours=100) > 850  # from the first row on
    return cfg


def test_rollups_kept_past_the_rows_answer_what_the_rows_answered(store: Store) -> None:
    cfg = _filled(store)
    before = _answers(store, cfg)
    dropped = store.apply_retention(1, 1, now=END + 600, rollup_retention_days=30)
    assert dropped["requests"] == 2  # the first two days' rows
    assert _rows_before(store, T0 + 2 * DAY) == 0 and store.count() > 0
    with store.engine.connect() as conn:
        assert raw_floor(conn) == T0 + 2 * DAY
        for table in TABLES:  # every table's rollups of the dropped days are still there
            oldest = conn.execute(sa.select(sa.func.min(table.c.bucket))).scalar()
            assert oldest is not None and oldest < T0 + DAY, table.name
    _same(_answers(store, cfg), before)
    # Once past `rollup_retention_days` the rollups go too, the day's as the rows' did.
    store.apply_retention(1, 1, now=T0 + 31 * DAY + 600, rollup_retention_days=30)
    with store.engine.connect() as conn:
        for table in TABLES:
            oldest = conn.execute(sa.select(sa.func.min(table.c.bucket))).scalar()
            assert oldest is None or oldest >= T0 + DAY, table.name


def test_a_window_that_starts_in_a_dropped_day_starts_at_its_next_whole_bucket(
    store: Store,
) -> None:
    """The partial first bucket of such a window was read from rows, which are gone."""
    _filled(store)
    store.apply_retention(1, 1, now=END + 600, rollup_retention_days=30)
    ragged = store.usage(T0 + 1234.5, END)
    same_usage(ragged, store.usage(T0 + 1500.0, END))
    assert sum(u.requests for u in ragged) > 0


def test_a_late_record_for_a_dropped_day_leaves_its_rollups_as_they_were(store: Store) -> None:
    """A spool replayed after the rows' day was dropped: its bucket is not rolled up again (it
    would count that one record alone), so the reports over that day stay as they were."""
    cfg = _filled(store)
    store.apply_retention(1, 1, now=END + 600, rollup_retention_days=30)
    before = _answers(store, cfg)
    late = full_record("late-for-a-dropped-day", T0 + 3 * HOUR + 17, upstream="a")
    store.write([record_row(late)])
    below = sa.select(sa.func.count()).select_from(DIRTY).where(DIRTY.c.bucket < T0 + DAY)
    with store.engine.connect() as conn:
        assert conn.execute(below).scalar() >= 1  # marked late, as any late record is
    store.roll_up(cfg, END + SETTLE_S + 60)
    _same(_answers(store, cfg), before)
    # The next retention drops the late row's day again and the marks below the floor.
    store.apply_retention(1, 1, now=END + 3600, rollup_retention_days=30)
    assert _rows_before(store, T0 + 2 * DAY) == 0
    with store.engine.connect() as conn:
        assert conn.execute(below).scalar() == 0
    _same(_answers(store, cfg), before)


def test_rows_not_rolled_up_are_kept_until_they_are(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config()
    fill(store, 72, 1500)
    store.roll_up(cfg, T0 + 12 * HOUR + SETTLE_S, max_hours=100)  # a rollup that fell behind
    rows = store.count()
    with caplog.at_level(logging.WARNING, logger="gateway.ledger.retention"):
        dropped = store.apply_retention(1, 1, now=END + 600, rollup_retention_days=30)
    assert dropped["requests"] == 0 and store.count() == rows
    assert any("until they are rolled up" in r.getMessage() for r in caplog.records)
    store.roll_up(cfg, END + SETTLE_S, max_hours=100)
    assert store.apply_retention(1, 1, now=END + 600, rollup_retention_days=30)["requests"] == 2


def test_without_a_longer_rollup_retention_rollups_go_with_the_rows(store: Store) -> None:
    _filled(store)
    assert store.apply_retention(1, 1, now=END + 600)["requests"] == 2
    with store.engine.connect() as conn:
        assert raw_floor(conn) is None
        for table in TABLES:
            oldest = conn.execute(sa.select(sa.func.min(table.c.bucket))).scalar()
            assert oldest is None or oldest >= T0 + 2 * DAY, table.name


def test_rollups_cannot_be_kept_shorter_than_the_rows() -> None:
    with pytest.raises(ValueError, match="rollup_retention_days \\(7\\) is shorter"):
        StoreConfig(retention_days=30, rollup_retention_days=7)
    assert StoreConfig(retention_days=2, rollup_retention_days=400).rollup_retention_days == 400
