"""Alembic revisions of the record store (alembic skips this file)."""
