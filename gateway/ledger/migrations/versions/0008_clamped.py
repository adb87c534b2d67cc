"""clamped on requests: the caps the gateway cut to the upstream's window

A max_tokens / max_completion_tokens that could not fit beside the prompt in the chosen
upstream's context window is clamped to what does (gateway/serving/adapt.py) and named here as
`max_tokens=32000->7000`, in the answer's x-plumbline-clamped header and in
gateway_clamped_total. Rows written before this revision have none.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("clamped", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("clamped")
