"""Messages for every other change to a table: drops, inserts, table events, batches.

Bodies follow Hive 2.3's JSON messages, so that its ``JSONMessageDeserializer`` reads
them (it ignores the fields we add):

* ``DROP_PARTITION`` — ``JSONDropPartitionMessage``: ``partitions``, a list of key → value;
* ``INSERT`` — ``JSONInsertMessage``: ``partKeyVals`` and ``files``, plus ``replace``;
* ``CREATE_TABLE`` / ``DROP_TABLE`` — ``JSONCreateTableMessage`` / ``JSONDropTableMessage``.

A batched announcement (:class:`AnnounceMode` ``write``) lists many partitions in one
``ADD_PARTITION`` or ``DROP_PARTITION``; :func:`plan_batches` splits the list so that no
message exceeds the byte cap, each message complete on its own. docs/lifecycle.md
describes the formats.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import (
    DEFAULT_TABLE_TYPE,
    Message,
    PartitionDetails,
    dump_body,
    message_headers,
)

__all__ = [
    "ANNOUNCE_PROPERTY",
    "HEADER_ALLOWANCE",
    "AnnounceMode",
    "EventContext",
    "PartitionChange",
    "TableFacts",
    "announce_mode",
    "build_insert",
    "build_partition_batch",
    "build_table_event",
    "common_prefix",
    "plan_batches",
]

ANNOUNCE_PROPERTY = "hcat.notify.announce"
"""Table property: ``partition`` (one ADD_PARTITION per partition) or ``write``."""

HEADER_ALLOWANCE = 2560
"""Bytes a message's headers may take (``HCAT_SPEC`` is at most 767 characters):
a batch body gets the byte cap less this."""

# Large enough for any event id or part number, so a size computed with them bounds the
# real one.
_ID_PLACEHOLDER = 10**18


class AnnounceMode(StrEnum):
    """How the new (or dropped) partitions of one write are announced."""

    PARTITION = "partition"  # one message per partition (Hive's listener, Oozie)
    WRITE = "write"  # one message per write, split under the byte cap


def announce_mode(
    properties: Mapping[str, str], override: AnnounceMode | str | None = None
) -> AnnounceMode:
    """The announce mode: ``override`` if given, else the table property, else partition.

    Raises:
        InvalidInputError: an unknown mode.
    """
    value = override if override is not None else properties.get(ANNOUNCE_PROPERTY)
    if value is None:
        return AnnounceMode.PARTITION
    try:
        return AnnounceMode(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(mode.value for mode in AnnounceMode)
        raise InvalidInputError(f"unknown announce mode {value!r}; use one of {choices}") from None


@dataclass(frozen=True)
class EventContext:
    """What every message of one transaction shares."""

    table: TableName
    topic: str
    timestamp: int
    server: str
    service_principal: str
    table_type: str = DEFAULT_TABLE_TYPE

    def base(self, event_type: EventType) -> dict[str, Any]:
        """The fields Hive's messages share, in Hive's names."""
        return {
            "eventType": event_type.value,
            "server": self.server,
            "servicePrincipal": self.service_principal,
            "db": self.table.db,
            "table": self.table.table,
            "tableType": self.table_type,
            "timestamp": int(self.timestamp),
        }


@dataclass(frozen=True)
class PartitionChange:
    """One partition a batched message lists, with what we know of its files."""

    spec: PartitionSpec
    details: PartitionDetails | None = None

    def detail_json(self) -> dict[str, Any]:
        """The partition's entry in ``partitionDetails`` (the job id is the message's)."""
        fields = (self.details or PartitionDetails()).as_fields()
        fields.pop("jobId", None)
        return fields


def common_prefix(specs: Sequence[PartitionSpec]) -> PartitionSpec | None:
    """The longest leading spec every one of ``specs`` starts with, or None."""
    if not specs:
        return None
    items: list[tuple[str, str | None]] = []
    for position, item in enumerate(specs[0].items):
        if all(len(spec.items) > position and spec.items[position] == item for spec in specs):
            items.append(item)
        else:
            break
    return PartitionSpec(tuple(items)) if items else None


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=True, separators=(",", ":")))


@dataclass(frozen=True)
class _Batch:
    """Which message of a batch this is: ``part`` of ``parts``, ``total`` partitions."""

    event_id: int
    part: int
    parts: int
    total: int


_PLACEHOLDER_BATCH = _Batch(_ID_PLACEHOLDER, _ID_PLACEHOLDER, _ID_PLACEHOLDER, _ID_PLACEHOLDER)


def _batch_body(
    event_type: EventType,
    context: EventContext,
    changes: Sequence[PartitionChange],
    batch: _Batch,
    job_id: str | None,
) -> dict[str, Any]:
    body = context.base(event_type)
    body["partitions"] = [change.spec.as_strings() for change in changes]
    body["eventId"] = batch.event_id
    prefix = common_prefix([change.spec for change in changes])
    if prefix is not None:
        body["spec"] = prefix.to_path()
    body["partitionDetails"] = [change.detail_json() for change in changes]
    body["batch"] = {"part": batch.part, "parts": batch.parts, "partitionCount": batch.total}
    if job_id is not None:
        body["jobId"] = job_id
    return body


def plan_batches(
    event_type: EventType,
    context: EventContext,
    changes: Sequence[PartitionChange],
    *,
    max_message_bytes: int,
    job_id: str | None = None,
) -> list[list[PartitionChange]]:
    """Split ``changes`` into groups whose messages fit in ``max_message_bytes``.

    Greedy, in the given order; the size of a group's body is bounded from above
    (placeholder ids, the first spec as the common prefix), so that the built message
    is never larger. A single partition larger than the cap still gets a message.
    """
    budget = max_message_bytes - HEADER_ALLOWANCE
    base = _size(_batch_body(event_type, context, [], _PLACEHOLDER_BATCH, job_id))
    groups: list[list[PartitionChange]] = []
    group: list[PartitionChange] = []
    size = 0
    for change in changes:
        item = _size(change.spec.as_strings()) + _size(change.detail_json())
        if group and size + item + 2 <= budget:  # a comma in each of the two lists
            size += item + 2
            group.append(change)
            continue
        if group:
            groups.append(group)
        # the common prefix of a group is at most its first spec: ,"spec":"..."
        size = base + len(',"spec":') + _size(change.spec.to_path()) + item
        group = [change]
    if group:
        groups.append(group)
    return groups


def build_partition_batch(
    event_type: EventType,
    context: EventContext,
    changes: Sequence[PartitionChange],
    *,
    event_id: int,
    part: int,
    parts: int,
    total: int,
    job_id: str | None = None,
) -> Message:
    """One ``ADD_PARTITION`` or ``DROP_PARTITION`` message listing ``changes``.

    ``partitions`` (Hive's list of key → value) names them; ``partitionDetails`` gives
    location, file count and bytes in the same order; ``batch`` says which part of how
    many this message is. ``spec`` and ``HCAT_SPEC`` are the partitions' common leading
    spec (empty when they share none).

    Raises:
        InvalidInputError: not a partition event, or no partitions.
    """
    if event_type not in (EventType.ADD_PARTITION, EventType.DROP_PARTITION):
        raise InvalidInputError(f"{event_type} messages do not list partitions")
    if not changes:
        raise InvalidInputError("a partition message needs at least one partition")
    body = _batch_body(event_type, context, changes, _Batch(event_id, part, parts, total), job_id)
    headers = message_headers(event_type, event_id, context.table, body.get("spec", ""))
    return Message(event_id, event_type, context.topic, headers, dump_body(body))


def build_insert(
    context: EventContext,
    spec: PartitionSpec,
    *,
    event_id: int,
    replace: bool,
    files: Sequence[str],
    details: PartitionDetails,
    files_added: int,
    bytes_added: int,
    max_message_bytes: int,
) -> Message:
    """The ``INSERT`` message of an append to (``replace`` False) or an overwrite of an
    existing partition.

    ``files`` lists the files the write added (Hive's ``files``); ``fileCount`` and
    ``bytes`` are the partition's totals afterwards. A file list that would take the
    message over the cap is cut short, and ``filesTruncated`` says so.
    """
    body = context.base(EventType.INSERT)
    body.update(
        {
            "partKeyVals": spec.as_strings(),
            "files": list(files),
            "replace": replace,
            "eventId": event_id,
            "spec": spec.to_path(),
            "filesAdded": files_added,
            "bytesAdded": bytes_added,
        }
    )
    body.update(details.as_fields())
    budget = max_message_bytes - HEADER_ALLOWANCE
    text = dump_body(body)
    if len(text) > budget:
        listed: list[str] = []
        size = len(text) - _size(body["files"]) + len(',"filesTruncated":true') + 2
        for name in files:
            if size + _size(name) + 1 > budget:
                break
            listed.append(name)
            size += _size(name) + 1
        body["files"] = listed
        body["filesTruncated"] = True
        text = dump_body(body)
    headers = message_headers(EventType.INSERT, event_id, context.table, spec.to_path())
    return Message(event_id, EventType.INSERT, context.topic, headers, text)


@dataclass(frozen=True)
class TableFacts:
    """What a table event says about the table besides its name."""

    location: str
    partition_keys: Sequence[str]
    storage_format: str
    topic: str
    partitions: int | None = None  # DROP_TABLE: how many partitions went with it
    purged: bool | None = None  # DROP_TABLE: whether its files were deleted


def build_table_event(
    event_type: EventType,
    context: EventContext,
    facts: TableFacts,
    *,
    event_id: int,
) -> Message:
    """A ``CREATE_TABLE`` or ``DROP_TABLE`` message (``HCAT_SPEC`` empty).

    ``context.topic`` is where it goes: the prefix topic, or the table's own topic (a
    table's subscribers learn that it was dropped); ``tableTopic`` names the table's.

    Raises:
        InvalidInputError: not a table event.
    """
    if not event_type.about_table:
        raise InvalidInputError(f"{event_type} is not a table event")
    body = context.base(event_type)
    body.update(
        {
            "eventId": event_id,
            "location": facts.location,
            "partitionKeys": list(facts.partition_keys),
            "format": facts.storage_format,
            "tableTopic": facts.topic,
        }
    )
    if event_type is EventType.CREATE_TABLE:
        body["files"] = []  # Hive's JSONCreateTableMessage lists the table's files
    if facts.partitions is not None:
        body["partitionCount"] = facts.partitions
    if facts.purged is not None:
        body["purged"] = facts.purged
    headers = message_headers(event_type, event_id, context.table, "")
    return Message(event_id, event_type, context.topic, headers, dump_body(body))
