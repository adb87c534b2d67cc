"""docs/metrics.md is written from the series the gateway defines
(gateway/reports/metric_reference.py): the committed page is today's, and every series has its
type, labels and a meaning."""

from __future__ import annotations

from pathlib import Path

from gateway.reports.metric_reference import render, series

PAGE = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def test_the_committed_page_is_the_code() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/metrics.md is stale: python -m gateway.reports.metric_reference > docs/metrics.md"
    )


def test_every_series_is_listed_with_labels_and_a_meaning() -> None:
    rows = {name: (kind, labels, doc) for name, kind, labels, doc in series()}
    assert rows["gateway_requests_total"][0] == "counter"
    assert "model" in rows["gateway_requests_total"][1]
    assert rows["gateway_ttft_seconds"][0] == "histogram"
    assert all(doc for _, _, doc in rows.values())
