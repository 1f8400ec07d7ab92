"""Announcements: the outbox events of every change to a table, written in the caller's Tx.

One place decides how a change is announced — per partition or per write (the table's
``hcat.notify.announce`` property or the caller's override), on which topics — so that
writes, registrations, drops, imports and table events say the same thing the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from hcat_notify.model.changes import (
    AnnounceMode,
    EventContext,
    PartitionChange,
    TableFacts,
    build_insert,
    build_partition_batch,
    build_table_event,
    plan_batches,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import validate_topic_name
from hcat_notify.model.wire import Message, PartitionDetails, build_add_partition
from hcat_notify.store import completeness
from hcat_notify.store.models import TableRow
from hcat_notify.store.outbox import add_outbox_rows
from hcat_notify.store.records import TableInfo
from hcat_notify.store.tx import Tx

__all__ = [
    "announce_insert",
    "announce_partitions",
    "announce_table",
    "event_context",
    "prefix_topic",
]


def event_context(tx: Tx, info: TableInfo, topic: str | None = None) -> EventContext:
    """What every message about ``info`` in this transaction shares."""
    return EventContext(
        table=info.name,
        topic=topic or info.topic,
        timestamp=int(tx.now.timestamp()),
        server=tx.server(),
        service_principal=tx.settings.broker_user,
        table_type=info.table_type,
    )


def prefix_topic(tx: Tx, info: TableInfo) -> str:
    """The topic of the table's CREATE_TABLE and DROP_TABLE: the one stored with the table
    (the creating process's prefix), else this process's prefix."""
    return validate_topic_name(info.prefix_topic or tx.settings.topic_prefix)


def announce_partitions(
    tx: Tx,
    info: TableInfo,
    event_type: EventType,
    changes: Sequence[PartitionChange],
    *,
    mode: AnnounceMode,
    job_id: str | None = None,
    row: TableRow | None = None,
) -> list[int]:
    """ADD_PARTITION or DROP_PARTITION events for ``changes``; the event id of each change.

    ``partition`` mode gives one message per partition; ``write`` mode one message listing
    them all, split so that none exceeds ``settings.max_message_bytes``. The sets the
    changes touch are settled before the transaction commits
    (:func:`hcat_notify.store.completeness.touch`; ``row``: the table's row, when the
    caller has it).
    """
    if not changes:
        return []
    delta = {EventType.ADD_PARTITION: 1, EventType.DROP_PARTITION: -1}.get(event_type, 0)
    completeness.touch(tx, info, [change.spec for change in changes], delta=delta, row=row)
    context = event_context(tx, info)
    if mode is AnnounceMode.WRITE:
        groups = plan_batches(
            event_type,
            context,
            changes,
            max_message_bytes=tx.settings.max_message_bytes,
            job_id=job_id,
        )
    else:
        groups = [[change] for change in changes]
    ids = tx.allocate_event_ids(len(groups))
    per_change: list[int] = []
    messages: list[Message] = []
    for part, (group, event_id) in enumerate(zip(groups, ids, strict=True), start=1):
        if event_type is EventType.ADD_PARTITION and mode is AnnounceMode.PARTITION:
            (change,) = group
            message = build_add_partition(
                event_id=event_id,
                table=info.name,
                topic=context.topic,
                partition=change.spec,
                timestamp=context.timestamp,
                server=context.server,
                service_principal=context.service_principal,
                table_type=info.table_type,
                details=change.details,
            )
        else:
            message = build_partition_batch(
                event_type,
                context,
                group,
                event_id=event_id,
                part=part,
                parts=len(groups),
                total=len(changes),
                job_id=job_id,
            )
        messages.append(message)
        per_change.extend([event_id] * len(group))
    add_outbox_rows(tx, messages, info.name)
    return per_change


def announce_insert(
    tx: Tx,
    info: TableInfo,
    spec: PartitionSpec,
    *,
    replace: bool,
    files: Sequence[str],
    details: PartitionDetails,
    files_added: int,
    bytes_added: int,
) -> int:
    """The INSERT event of an append to (or, ``replace``, an overwrite of) a partition
    (its set is settled before the transaction commits, as for every change)."""
    completeness.touch(tx, info, [spec], delta=0)
    (event_id,) = tx.allocate_event_ids(1)
    message = build_insert(
        event_context(tx, info),
        spec,
        event_id=event_id,
        replace=replace,
        files=files,
        details=details,
        files_added=files_added,
        bytes_added=bytes_added,
        max_message_bytes=tx.settings.max_message_bytes,
    )
    add_outbox_rows(tx, [message], info.name)
    return event_id


def announce_table(
    tx: Tx,
    info: TableInfo,
    event_type: EventType,
    *,
    partitions: int | None = None,
    purged: bool | None = None,
) -> list[int]:
    """CREATE_TABLE or DROP_TABLE events: on the prefix topic, as Hive's listener sends
    them, and a DROP_TABLE also on the table's own topic (when that is another one), so
    that its subscribers learn it is gone. Returns the event ids."""
    topics = [prefix_topic(tx, info)]
    if event_type is EventType.DROP_TABLE and info.topic not in topics:
        topics.append(info.topic)
    facts = TableFacts(
        location=info.location,
        partition_keys=info.partition_keys,
        storage_format=info.storage_format,
        topic=info.topic,
        partitions=partitions,
        purged=purged,
    )
    ids = tx.allocate_event_ids(len(topics))
    messages = [
        build_table_event(event_type, event_context(tx, info, topic), facts, event_id=event_id)
        for topic, event_id in zip(topics, ids, strict=True)
    ]
    add_outbox_rows(tx, messages, info.name)
    return ids
