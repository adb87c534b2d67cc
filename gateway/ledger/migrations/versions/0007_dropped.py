"""dropped on requests: the fields a front door dropped and marked

A door that cannot serve a field (a hosted tool, say) drops it before the upstream and names it
here, in the answer's x-plumbline-dropped header and in gateway_dropped_fields_total
(gateway/edge/doors/policy.py). Rows written before this revision have none.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("dropped", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("dropped")
