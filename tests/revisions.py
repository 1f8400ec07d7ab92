"""A catalog left at an older schema revision, with rows, to test what a migration does."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from hcat_notify.store.engine import alembic_config, open_engine

__all__ = ["catalog_at"]


def catalog_at(db_url: str, revision: str, *statements: str) -> None:
    """Create the catalog of ``db_url`` at ``revision`` and run ``statements`` on it."""
    engine = open_engine(db_url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection, None), revision)
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()
