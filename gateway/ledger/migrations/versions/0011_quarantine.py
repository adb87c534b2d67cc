"""coerced on requests, and the quarantine table

`coerced` names the record values that could not be stored as given (`max_tokens:list`), stored
as NULL or cut to fit instead (gateway/ledger/columns.py). `quarantine` keeps a row the store
refused, as JSON with the database's reason, so that it never holds back another row
(gateway/ledger/quarantine.py). Rows written before this revision have no `coerced`.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("coerced", sa.Text))
    op.create_table(
        "quarantine",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("time", sa.Float, primary_key=True),
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("row", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("quarantined", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("quarantine")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("coerced")
