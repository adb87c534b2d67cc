"""shadow rows by time: a partial index for the shadow report's window

`ix_requests_shadow_time` indexes `time` of the rows with a `shadow_of` only (the shadow copies,
a small share of the rows). `report shadow` and the console's traffic panel read the shadow
pairs of a window: with it they read those rows alone. Without it SQLite's planner scanned
every row of the window by the primary key (7 s for a day at the seed's rate, 26 M rows), and
PostgreSQL went through `ix_requests_shadow_of`, every shadow row kept, for a window of an hour
as for a week.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

SHADOWS = sa.text("shadow_of IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_requests_shadow_time",
        "requests",
        ["time"],
        postgresql_where=SHADOWS,
        sqlite_where=SHADOWS,
    )


def downgrade() -> None:
    op.drop_index("ix_requests_shadow_time", table_name="requests")
