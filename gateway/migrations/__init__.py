"""Alembic migrations for the record store; run programmatically by `gateway.store.migrate`."""
