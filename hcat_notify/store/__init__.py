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
from hcat_notify.store.commits import CommitJournal, CommitPartition, CommitRecord, JournalEntry

__all__ = [
    "DEFAULT_RETENTION",
    "OUTBOX_CHANNEL",
    "STORAGE_FORMATS",
    "Catalog",
    "CommitJournal",
    "CommitPartition",
    "CommitRecord",
    "JournalEntry",
    "Lease",
    "NewPartition",
    "OutboxEvent",
    "PartitionInfo",
    "RetainedDone",
    "TableInfo",
]
