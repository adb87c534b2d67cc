"""5-minute rollups filled in SQL, dirty buckets for late records

The hourly tables of 0017 give way to 5-minute buckets (`usage_rollup`, `busy_rollup`,
`health_rollup`; `usage_rollup` also counts reasoning leaks for the console's traffic panel)
and `rollup_dirty`, the buckets a record was written into after they were rolled up
(`gateway.ledger.rollups`). The new tables start empty: housekeeping rolls them up again from
the raw rows (a few hours a tick), and until then reports scan the raw rows.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

SUMS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "cost_usd",
    "charged_cost_usd",
    "charged_computed_usd",
    "truncated",
    "errors",
    "usage_estimated",
    "capped",
)


def upgrade() -> None:
    op.drop_table("health_hourly")
    op.drop_table("busy_hourly")
    op.drop_table("usage_hourly")
    op.execute("DELETE FROM rollup_marks")
    op.create_table(
        "usage_rollup",
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("model", sa.String(128), primary_key=True),
        sa.Column("upstream", sa.String(128), primary_key=True),
        sa.Column("lane", sa.String(16), primary_key=True),
        *(sa.Column(n, sa.Float if "usd" in n else sa.BigInteger, nullable=False) for n in SUMS),
        sa.Column("leaks", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "busy_rollup",
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("node", sa.String(128), primary_key=True),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_table(
        "health_rollup",
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("upstream", sa.String(128), primary_key=True),
        *(sa.Column(f"c{i}", sa.BigInteger, nullable=False) for i in range(15)),
        sa.Column("failed_calls", sa.BigInteger, nullable=False),
    )
    op.create_table("rollup_dirty", sa.Column("bucket", sa.BigInteger, primary_key=True))


def downgrade() -> None:
    op.drop_table("rollup_dirty")
    op.drop_table("health_rollup")
    op.drop_table("busy_rollup")
    op.drop_table("usage_rollup")
    op.execute("DELETE FROM rollup_marks")
    op.create_table(
        "usage_hourly",
        sa.Column("hour", sa.BigInteger, primary_key=True),
        sa.Column("model", sa.String(128), primary_key=True),
        sa.Column("upstream", sa.String(128), primary_key=True),
        sa.Column("lane", sa.String(16), primary_key=True),
        *(sa.Column(n, sa.Float if "usd" in n else sa.BigInteger, nullable=False) for n in SUMS),
    )
    op.create_table(
        "busy_hourly",
        sa.Column("hour", sa.BigInteger, primary_key=True),
        sa.Column("node", sa.String(128), primary_key=True),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_table(
        "health_hourly",
        sa.Column("hour", sa.BigInteger, primary_key=True),
        sa.Column("upstream", sa.String(128), primary_key=True),
        *(sa.Column(f"c{i}", sa.BigInteger, nullable=False) for i in range(15)),
        sa.Column("failed_calls", sa.BigInteger, nullable=False),
    )
