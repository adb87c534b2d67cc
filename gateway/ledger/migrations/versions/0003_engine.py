"""engine on requests: the serving stack that answered

The vLLM version and chat-template fingerprint the health prober learnt for the upstream that
answered (`gateway/serving/engine.py`), so a change of quality or speed can be set against an
upgrade.
Rows written before this revision have none.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("engine", sa.String(128)))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("engine")
