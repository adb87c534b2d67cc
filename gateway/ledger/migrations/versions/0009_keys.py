"""keys and key_usage: the admin API's keys and the budget counters, now alembic's

The access guard used to create these two tables itself (`metadata.create_all` when it
attached to the store), outside the revisions. A store that already has them, built that way,
keeps them and their rows as they are: this revision creates only what is missing.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = set(sa.inspect(op.get_bind()).get_table_names())
    if "keys" not in present:
        op.create_table(
            "keys",
            sa.Column("id", sa.String(128), primary_key=True),
            sa.Column("sha256", sa.String(64), nullable=False, unique=True),
            sa.Column("role", sa.String(16), nullable=False),
            sa.Column("models", sa.Text),  # JSON list, NULL = every model
            sa.Column("requests_per_window", sa.Integer),
            sa.Column("tokens_per_window", sa.BigInteger),
            sa.Column("window_s", sa.Float, nullable=False),
            sa.Column("created", sa.Float, nullable=False),
            sa.Column("revoked", sa.Float),
        )
    if "key_usage" not in present:
        op.create_table(
            "key_usage",
            sa.Column("key_id", sa.String(128), primary_key=True),
            sa.Column("window_start", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("requests", sa.Integer, nullable=False),
            sa.Column("tokens", sa.BigInteger, nullable=False),
        )


def downgrade() -> None:
    op.drop_table("key_usage")
    op.drop_table("keys")
