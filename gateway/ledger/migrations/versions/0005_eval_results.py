"""eval results: scheduled runs kept in the store

A scheduled eval run's scored items, one row each (`ItemResult` as JSON), so `plumbline eval
report --from-store` can report a run after the gateway that ran it, and its disk, are gone.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_results",
        sa.Column("run", sa.String(128), primary_key=True),
        sa.Column("target", sa.String(256), primary_key=True),
        sa.Column("item_digest", sa.String(128), primary_key=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("eval_results")
