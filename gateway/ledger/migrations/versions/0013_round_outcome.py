"""round outcomes and tripwire verdicts: why a scheduled round failed, what the tripwire found

`eval_rounds` gains how a round ended (`outcome`: ok | failed; a failed round's `error_class` and
its redacted `error` message), so the console and `plumbline report health` say why rather than
"no round has run". `tripwire_verdicts` keeps every tripwire a round, `plumbline eval run` or
`plumbline bench` ran before scoring or benching a target: its verdict, the counts, and per prompt
the verdict and why (JSON), read back by /health, the console and the eval report.
`requests.unasked_reasoning` flags an answer that came with reasoning although the request asked
for none (thinking off): the watchdog's `unasked_reasoning` check, read by `report health`.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(
            sa.Column("unasked_reasoning", sa.Boolean, nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("eval_rounds") as batch:
        batch.add_column(sa.Column("outcome", sa.String(16)))
        batch.add_column(sa.Column("error_class", sa.String(64)))
        batch.add_column(sa.Column("error", sa.Text))
    op.create_table(
        "tripwire_verdicts",
        sa.Column("time", sa.Float, primary_key=True),
        sa.Column("target", sa.String(256), primary_key=True),
        sa.Column("run", sa.String(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("report", sa.Text, nullable=False),
    )
    op.create_index("ix_tripwire_verdicts_run", "tripwire_verdicts", ["run"])


def downgrade() -> None:
    op.drop_index("ix_tripwire_verdicts_run", "tripwire_verdicts")
    op.drop_table("tripwire_verdicts")
    with op.batch_alter_table("eval_rounds") as batch:
        batch.drop_column("error")
        batch.drop_column("error_class")
        batch.drop_column("outcome")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("unasked_reasoning")
