"""trust flags on requests: watchdog flags, shadow lane link and agreement

Adds the columns `gateway/trust/watchdog.py` and `gateway/trust/shadow.py` fill in: whether the
answer was
sampled and found degenerate, the first tool-call problem, provider mismatch against the pinned
provider, cost drift, and for shadow rows the primary's request id and their agreement. Flags
default to false so rows written before this revision read as "not flagged".

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

FLAGS = ("sampled", "degenerate", "provider_mismatch", "cost_drift")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        for name in FLAGS:
            batch.add_column(sa.Column(name, sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("tool_call_error", sa.String(32)))
        batch.add_column(sa.Column("shadow_of", sa.String(128)))
        batch.add_column(sa.Column("agreement", sa.String(32)))
    op.create_index("ix_requests_shadow_of", "requests", ["shadow_of"])


def downgrade() -> None:
    op.drop_index("ix_requests_shadow_of", table_name="requests")
    with op.batch_alter_table("requests") as batch:
        for name in ("agreement", "shadow_of", "tool_call_error", *reversed(FLAGS)):
            batch.drop_column(name)
