"""The console traffic panel's counts from the 5-minute rollups (`gateway.ledger.rollup_traffic`)
are what the raw rows say, per lane, on SQLite and PostgreSQL; the panel's rate series is in
slices of whole buckets and adds up to its requests."""

from __future__ import annotations

from gateway.edge.console import panels
from gateway.ledger.rollup_sql import BUCKET
from gateway.ledger.rollup_traffic import bucket_counts, model_counts
from gateway.ledger.rollups import HOUR, SETTLE_S
from gateway.ledger.store import Store
from tests.gateway.ledger.test_rollups import T0, config, fill

NOW = T0 + 30 * HOUR - 123.0


def counts(store: Store, since: float, until: float, lane: str) -> tuple[object, object]:
    with store.engine.connect() as conn:
        return model_counts(conn, since, until, lane), bucket_counts(conn, since, until, lane)


def test_rolled_up_traffic_counts_are_the_raw_ones(store: Store) -> None:
    cfg = config()
    fill(store, 30, 3000, seed=7)
    windows = [(NOW - 24 * HOUR, NOW), (NOW - 3600, NOW), (T0 + 77.7, T0 + 29 * HOUR + 1)]
    lanes = ("client", "eval", "all")
    raw = [counts(store, s, u, lane) for s, u in windows for lane in lanes]
    panel = [panels.traffic(cfg, store, w, NOW, lane) for w in ("1h", "24h") for lane in lanes]
    assert store.roll_up(cfg, NOW, max_hours=100) > 300
    assert [counts(store, s, u, lane) for s, u in windows for lane in lanes] == raw
    assert [panels.traffic(cfg, store, w, NOW, lane) for w in ("1h", "24h") for lane in lanes] == (
        panel
    )
    by_model, by_bucket = raw[0]
    assert by_model and all(k % BUCKET == 0 for k in by_bucket)  # type: ignore[attr-defined]


def test_the_rate_series_is_in_slices_of_whole_buckets(store: Store) -> None:
    cfg = config()
    fill(store, 30, 3000, seed=8)
    store.roll_up(cfg, NOW + SETTLE_S, max_hours=100)
    for window, width in panels.SERIES_WIDTH.items():
        doc = panels.traffic(cfg, store, window, NOW, "all")
        span = panels.WINDOWS[window]
        assert width % BUCKET == 0 and len(doc["series"]) in (span // width, span // width + 1)
        start, total, previous = NOW - span, 0.0, NOW - span
        for point in doc["series"]:
            edge = point["t"]
            assert edge == NOW or edge % width == 0
            total += point["per_minute"] * (edge - previous) / 60
            previous = edge
        requests = sum(m["requests"] for m in doc["models"])
        assert abs(total - requests) < 1e-6 * max(1, requests) and start < NOW
