"""shape on requests: the task shape routing classified the request as

`tools`, `long_context`, `edit`, `structured`, `reasoning` or `default`
(gateway/serving/shape.py); a route's `[models.NAME.shapes]` sends each to its own sub-route,
and the quality gate decides per shape. Rows written before this revision, and requests that
never reached routing, have none.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("shape", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("shape")
