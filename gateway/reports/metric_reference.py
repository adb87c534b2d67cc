"""The metrics reference (docs/metrics.md), written from the series the gateway defines.

`gateway.ledger.metrics.Metrics` declares every Prometheus series with its help text and labels;
this lists them, so the page cannot drift from what /metrics serves:
`tests/gateway/reports/test_metric_reference.py` compares the committed page with this output.

    python -m gateway.reports.metric_reference > docs/metrics.md
"""

from __future__ import annotations

from typing import Any

SUFFIX = {"counter": "_total", "histogram": "_bucket / _sum / _count"}


def series() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name as scraped, type, labels, help) of every series, in the order they are defined."""
    from gateway.config import Config
    from gateway.ledger.backlog import Backlog
    from gateway.ledger.metrics import Metrics
    from gateway.serving.loop_watch import LoopWatch
    from gateway.serving.wire import Wire
    from gateway.trust.shadow import ShadowMirror
    from gateway.trust.watchdog import Watchdog

    config = Config()
    metrics = Metrics(config)  # with every other part that adds series to its registry
    Backlog(metrics.registry)
    LoopWatch(metrics.registry)
    Watchdog(config, config.watchdog, metrics.registry)
    ShadowMirror(config, {}, Wire(1.0), lambda record: None, registry=metrics.registry)
    out = []
    collectors: Any = metrics.registry._collector_to_names  # prometheus-client's own index
    for collector in collectors:
        kind = getattr(collector, "_type", "")
        name = getattr(collector, "_name", "")
        if not name:
            continue
        shown = name + SUFFIX.get(kind, "") if kind != "histogram" else name
        labels = tuple(getattr(collector, "_labelnames", ()))
        out.append((shown, kind, labels, getattr(collector, "_documentation", "")))
    return out


def render() -> str:
    """docs/metrics.md."""
    lines = [
        "# Metrics",
        "",
        "Written from the gateway's series by `python -m gateway.reports.metric_reference` (do not",
        "edit by hand; a test fails when this page and the code disagree). `GET /metrics` serves",
        "them in Prometheus's text format (`[access].metrics_requires_key` can require a key).",
        "Every series is derived from the one request record that also feeds the store, so the",
        "store, the reports and these numbers cannot disagree. Label values are bounded: past the",
        "names the config knows (and, for providers and error classes, the first few new ones),",
        "values are counted under `other`, so a typo cannot mint series. Histograms are scraped",
        "as `NAME_bucket`, `NAME_sum` and `NAME_count`.",
        "",
        "| series | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for name, kind, labels, doc in series():
        shown = ", ".join(f"`{label}`" for label in labels)
        lines.append(f"| `{name}` | {kind} | {shown} | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
