"""demotions: watchdog demotions shared by the gateways on a store

One row per (upstream, gateway) while that gateway's watchdog keeps the upstream demoted,
refreshed each minute; every gateway routes around an upstream any of them demoted.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "demotions",
        sa.Column("upstream", sa.String(128), primary_key=True),
        sa.Column("gateway", sa.String(128), primary_key=True),
        sa.Column("checks", sa.String(512), nullable=False),
        sa.Column("refreshed", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("demotions")
