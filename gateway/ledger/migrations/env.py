"""Alembic environment: runs on the connection `gateway.ledger.database.migrate` hands over (no
alembic.ini).

Autogenerate compares against the row models' metadata (`gateway.ledger.rows`). To write a new
revision from a checkout: `alembic -x url=sqlite:///var/dev.db revision --autogenerate -m "..."`
is not wired; create the file by hand from `script.py.mako` and test it with
`tests/gateway/ledger/test_store.py`.
"""

from __future__ import annotations

from alembic import context

from gateway.ledger.rows import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "run migrations through gateway.ledger.database.migrate(), which passes a connection"
    )

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
