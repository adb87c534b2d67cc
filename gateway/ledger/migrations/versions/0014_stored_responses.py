"""stored responses: the Responses door's `store` and the Messages door's threads

`stored_responses` keeps a response object (or a thread's state: system, tools, conversation)
under the key that made it; `stored_items` its input and output items in order, findable by item
id (`previous_response_id`, `item_reference`, `GET /v1/responses/{id}/input_items`). Expired rows
go with the hourly retention (`store.responses_retention_days`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stored_responses",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("door", sa.String(16), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_stored_responses_created", "stored_responses", ["created"])
    op.create_table(
        "stored_items",
        sa.Column("response_id", sa.String(128), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("item_id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("item", sa.Text, nullable=False),
    )
    op.create_index("ix_stored_items_item_id", "stored_items", ["item_id"])


def downgrade() -> None:
    op.drop_index("ix_stored_items_item_id", "stored_items")
    op.drop_table("stored_items")
    op.drop_index("ix_stored_responses_created", "stored_responses")
    op.drop_table("stored_responses")
