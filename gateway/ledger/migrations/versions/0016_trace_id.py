"""trace id: each request's OpenTelemetry trace id beside its request id

`requests.trace_id` (32 hex digits) is the trace the request's spans were exported under when
`[telemetry]` is on (gateway/telemetry.py, docs/telemetry.md); NULL when tracing is off.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("trace_id")
