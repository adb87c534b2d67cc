"""What the ledger has not written yet, said in the metrics and on `/health`.

`gateway_ledger_spooled_rows`: request rows waiting in the spool folder (the store was away;
they are replayed when it is back). `gateway_ledger_quarantined_rows`: rows the store refused
and keeps aside in its `quarantine` table, every gateway's (`gateway/ledger/quarantine.py`);
a number that grows is a bug to report, with the reasons in that table. Both are counted by the
record queue's thread every few seconds and after each change (`RecordQueue._count`); with
several workers the most recent count is shown (they share the spool folder and the store).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge


class Backlog:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.spooled = Gauge(
            "gateway_ledger_spooled_rows",
            "Request rows waiting in the spool for the store.",
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.quarantined = Gauge(
            "gateway_ledger_quarantined_rows",
            "Rows the store refused, kept in its quarantine table with the reason.",
            multiprocess_mode="mostrecent",
            registry=registry,
        )

    def update(self, stats: Any) -> None:
        self.spooled.set(stats.spool_rows)
        self.quarantined.set(stats.quarantine_rows)


def health(queue: Any) -> dict[str, Any]:
    """`/health`'s `ledger`: the backlog, and what this process recovered and set aside."""
    if queue is None:
        return {"store": False}
    s = queue.stats
    return {
        "store": True,
        "spooled_rows": s.spool_rows,
        "quarantined_rows": s.quarantine_rows,
        "journal_open": queue.journal.pending if queue.journal is not None else None,
        "recovered_rows": s.recovered,
        "dropped_rows": s.dropped,
    }
