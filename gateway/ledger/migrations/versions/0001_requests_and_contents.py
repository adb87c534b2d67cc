"""requests and contents tables

On PostgreSQL both tables are range-partitioned by day on `time` (epoch seconds); the store
creates each day's partition before writing into it and drops whole partitions for retention.
On SQLite they are plain tables (the partition clause is PostgreSQL-only and ignored there).
The primary key (time, request_id) leads with time, so it is the time index.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "requests",
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("door", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("key_id", sa.String(128)),
        sa.Column("lane", sa.String(16), nullable=False),
        sa.Column("upstream", sa.String(128)),
        sa.Column("provider", sa.String(128)),
        sa.Column("attempts", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_class", sa.String(64)),
        sa.Column("finish_reason", sa.String(32)),
        sa.Column("truncated", sa.Boolean, nullable=False),
        sa.Column("reasoning_leak", sa.Boolean, nullable=False),
        sa.Column("max_tokens", sa.Integer),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("cached_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("reasoning_tokens", sa.Integer, nullable=False),
        sa.Column("usage_estimated", sa.Boolean, nullable=False),
        sa.Column("queue_s", sa.Float),
        sa.Column("ttft_s", sa.Float),
        sa.Column("ttfa_s", sa.Float),
        sa.Column("e2e_s", sa.Float),
        sa.Column("itl_mean_s", sa.Float),
        sa.Column("itl_p99_s", sa.Float),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float),
        sa.Column("charged_cost_usd", sa.Float),
        sa.Column("params_hash", sa.String(128)),
        sa.Column("tool_calls", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("time", "request_id", name="pk_requests"),
        postgresql_partition_by="RANGE (time)",
    )
    op.create_index("ix_requests_model_time", "requests", ["model", "time"])
    op.create_index("ix_requests_upstream_time", "requests", ["upstream", "time"])
    op.create_table(
        "contents",
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("prompt", sa.Text),
        sa.Column("response", sa.Text),
        sa.PrimaryKeyConstraint("time", "request_id", name="pk_contents"),
        postgresql_partition_by="RANGE (time)",
    )


def downgrade() -> None:
    op.drop_table("contents")
    op.drop_table("requests")
