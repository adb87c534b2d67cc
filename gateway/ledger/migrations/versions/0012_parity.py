"""semantics, unsent and accepted_unequal on requests: the request's meaning and its parity

`semantics` is what the request asked of the model as sent (`temperature=0.7, top_k=20,
enable_thinking=false`, gateway/serving/semantics.py); `unsent` names what of it the answering
upstream could not be told (`api-b cannot be sent top_k=20 (kind openai)`) and
`accepted_unequal` what of that the route's `accept_unequal` accepts (gateway/serving/dialect.py).
Rows written before this revision have none.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ("semantics", "unsent", "accepted_unequal")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
