"""Alembic migrations for the record store; run programmatically by
`gateway.ledger.database.migrate`."""
