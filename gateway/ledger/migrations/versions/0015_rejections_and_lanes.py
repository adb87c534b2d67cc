"""rejections and lanes: refused requests are kept; the client lane is called "client"

`rejections` keeps every request the gateway refused before it had a record (an unknown model,
a body that is not JSON, a bad parameter, a bad key, a key over budget): its reason, status,
door, key id, the model as asked (cut to 128 characters) and request id
(`gateway/ledger/rejection.py`). The client lane, stored as "prod" before, is "client" from
here on, as the metrics' `lane` label says it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejections",
        sa.Column("time", sa.Float, primary_key=True),
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("client_request_id", sa.String(128)),
        sa.Column("door", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("key_id", sa.String(128)),
        sa.Column("model", sa.String(128)),
        sa.Column("lane", sa.String(16), nullable=False),
    )
    op.create_index("ix_rejections_reason_time", "rejections", ["reason", "time"])
    op.execute("UPDATE requests SET lane = 'client' WHERE lane = 'prod'")


def downgrade() -> None:
    op.execute("UPDATE requests SET lane = 'prod' WHERE lane = 'client'")
    op.drop_index("ix_rejections_reason_time", "rejections")
    op.drop_table("rejections")
