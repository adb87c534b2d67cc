"""gate decisions, eval rounds, shadow usage: what several gateways on one store share

`gate_decisions` keeps every quality-gate decision, so all gateways route a gated model by the
same latest one (it was a file beside each gateway's config). `eval_rounds` records each
scheduled eval round and the gateway that claimed it, so one round runs per interval however
many gateways there are. `shadow_usage` counts each shadow's requests and spend per UTC day, so
its daily budget holds across gateways and restarts (it was counted in each process).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gate_decisions",
        sa.Column("model", sa.String(128), primary_key=True),
        sa.Column("time", sa.Float, primary_key=True),
        sa.Column("decision", sa.Text, nullable=False),
    )
    op.create_table(
        "eval_rounds",
        sa.Column("started", sa.Float, primary_key=True),
        sa.Column("gateway", sa.String(128), nullable=False),
        sa.Column("finished", sa.Float),
    )
    op.create_table(
        "shadow_usage",
        sa.Column("model", sa.String(128), primary_key=True),
        sa.Column("day", sa.Integer, primary_key=True),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("usd", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("shadow_usage")
    op.drop_table("eval_rounds")
    op.drop_table("gate_decisions")
