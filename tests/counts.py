"""Row counts of catalog tables, to show that a refused operation changed nothing."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, func, select

from hcat_notify.store import Catalog
from hcat_notify.store.models import (
    CommitJournalRow,
    OutboxRow,
    PartitionRow,
    RetentionRow,
    TableRow,
)

__all__ = ["row_counts"]

MODELS = (TableRow, PartitionRow, RetentionRow, OutboxRow, CommitJournalRow)


def row_counts(catalog: Catalog, models: tuple[type[Any], ...] = MODELS) -> dict[str, int]:
    """Rows of each catalog table that an operation may write (or of ``models``), by
    table name."""
    engine = create_engine(catalog.settings.database_url)
    try:
        with engine.connect() as connection:
            return {
                model.__tablename__: connection.execute(
                    select(func.count()).select_from(model)
                ).scalar_one()
                for model in models
            }
    finally:
        engine.dispose()
