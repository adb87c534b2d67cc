"""hourly rollups: usage per (hour, model, upstream), node busy seconds per hour

`usage_hourly`, `busy_hourly` and `health_hourly` (`report health`'s counts and failed calls
per upstream) are filled by housekeeping, one completed hour at a time
(`gateway.ledger.rollups`); `rollup_marks` says up to which hour. Reports read whole hours from
them and scan raw rows only for the partial hours at a window's ends.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
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
    op.create_table(
        "rollup_marks",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("upto", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rollup_marks")
    op.drop_table("health_hourly")
    op.drop_table("busy_hourly")
    op.drop_table("usage_hourly")
