"""Alembic migrations of the catalog database; applied on first use."""
