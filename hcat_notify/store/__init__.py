"""The catalog store: SQLAlchemy models, migrations and the :class:`Catalog` API."""

from hcat_notify.store.catalog import (
    DEFAULT_RETENTION,
    OUTBOX_CHANNEL,
    STORAGE_FORMATS,
    Catalog,
    Lease,
    NewPartition,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
)

__all__ = [
    "DEFAULT_RETENTION",
    "OUTBOX_CHANNEL",
    "STORAGE_FORMATS",
    "Catalog",
    "Lease",
    "NewPartition",
    "OutboxEvent",
    "PartitionInfo",
    "RetainedDone",
    "TableInfo",
]
