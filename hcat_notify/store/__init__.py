"""The catalog store: SQLAlchemy models, migrations and the :class:`Catalog` API."""

from hcat_notify.store.catalog import (
    DEFAULT_RETENTION,
    STORAGE_FORMATS,
    Catalog,
    NewPartition,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
)

__all__ = [
    "DEFAULT_RETENTION",
    "STORAGE_FORMATS",
    "Catalog",
    "NewPartition",
    "OutboxEvent",
    "PartitionInfo",
    "RetainedDone",
    "TableInfo",
]
