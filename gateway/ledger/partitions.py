"""PostgreSQL's day partitions of `requests` and `contents`: a day's partition is
`requests_p20261129`, ranging over that UTC day's epoch seconds (`time`). The store creates one
before writing into it and drops whole ones for retention (`gateway.ledger.store`).
"""

from __future__ import annotations

import calendar
import time

import sqlalchemy as sa

DAY = 86_400
# The partitions of the table named :parent.
PARTITIONS = sa.text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :parent"
)


def day_start(t: float) -> int:
    return int(t // DAY) * DAY


def partition_name(table: str, day: int) -> str:
    return f"{table}_p{time.strftime('%Y%m%d', time.gmtime(day))}"


def partition_day(name: str) -> int | None:
    """The day a partition named by `partition_name` holds, or None for another name."""
    try:
        return calendar.timegm(time.strptime(name.rsplit("_p", 1)[1], "%Y%m%d"))
    except (IndexError, ValueError):
        return None


def partition_ddl(table: str, day: int) -> sa.TextClause:
    """Create `table`'s partition of `day` unless it exists."""
    return sa.text(
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, day)} PARTITION OF {table} "
        f"FOR VALUES FROM ({day}) TO ({day + DAY})"
    )
