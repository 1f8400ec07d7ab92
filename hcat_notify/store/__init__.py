"""The catalog store: tables, partitions, retained dones, the outbox, leases, the journal.

:class:`Catalog` is the public facade; the records it returns live in
:mod:`hcat_notify.store.records`. Names are loaded on first use (PEP 562), so importing
this package costs nothing until a catalog is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.store.catalog import Catalog
    from hcat_notify.store.journal import CommitJournal, table_definition
    from hcat_notify.store.quick import quick_table
    from hcat_notify.store.records import (
        DEFAULT_RETENTION,
        MAX_RETENTION,
        CommitRecord,
        JournalEntry,
        JournalState,
        Lease,
        NewPartition,
        OutboxEvent,
        PartitionInfo,
        RefusedEvent,
        RetainedDone,
        TableActivity,
        TableInfo,
        WriteMode,
    )
    from hcat_notify.store.set_records import DuePass, RuleRecord, SetReport
    from hcat_notify.store.sets_view import Sets
    from hcat_notify.store.table_changes import (
        DroppedPartitions,
        DroppedTable,
        Registration,
    )
    from hcat_notify.store.tables import STORAGE_FORMATS
    from hcat_notify.store.tx import OUTBOX_CHANNEL

__all__ = [
    "DEFAULT_RETENTION",
    "MAX_RETENTION",
    "OUTBOX_CHANNEL",
    "STORAGE_FORMATS",
    "Catalog",
    "CommitJournal",
    "CommitRecord",
    "DroppedPartitions",
    "DroppedTable",
    "DuePass",
    "JournalEntry",
    "JournalState",
    "Lease",
    "NewPartition",
    "OutboxEvent",
    "PartitionInfo",
    "RefusedEvent",
    "Registration",
    "RetainedDone",
    "RuleRecord",
    "SetReport",
    "Sets",
    "TableActivity",
    "TableInfo",
    "WriteMode",
    "quick_table",
    "table_definition",
]

_RECORDS = "hcat_notify.store.records"
__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        **dict.fromkeys(__all__, _RECORDS),
        "Catalog": "hcat_notify.store.catalog",
        "CommitJournal": "hcat_notify.store.journal",
        "table_definition": "hcat_notify.store.journal",
        "DroppedPartitions": "hcat_notify.store.table_changes",
        "DroppedTable": "hcat_notify.store.table_changes",
        "Registration": "hcat_notify.store.table_changes",
        "quick_table": "hcat_notify.store.quick",
        **dict.fromkeys(["DuePass", "RuleRecord", "SetReport"], "hcat_notify.store.set_records"),
        "Sets": "hcat_notify.store.sets_view",
        "STORAGE_FORMATS": "hcat_notify.store.tables",
        "OUTBOX_CHANNEL": "hcat_notify.store.tx",
    },
)
