"""The messages on the wire: headers and JSON bodies (docs/architecture.md, "The wire contract").

``ADD_PARTITION`` bodies are compatible with Hive's ``JSONAddPartitionMessage`` (Hive's
reader ignores the extra fields we add); ``MARK_SET_DONE`` is ours. The other events
(drops, inserts, table events, batched announcements) are built in
:mod:`hcat_notify.model.changes`. The JSON Schemas in ``schemas/`` describe every body;
tests validate built messages against them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hcat_notify.model.events import (
    HEADER_DONE_REASON,
    HEADER_EVENT,
    HEADER_EVENT_ID,
    HEADER_FORMAT,
    HEADER_RULE_VERSION,
    HEADER_SET_GENERATION,
    HEADER_SPEC,
    HEADER_TABLE,
    HEADER_VERSION,
    MESSAGE_FORMAT,
    MESSAGE_VERSION,
    EventType,
)
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec

__all__ = [
    "DEFAULT_TABLE_TYPE",
    "Message",
    "PartitionDetails",
    "build_add_partition",
    "build_mark_set_done",
    "dump_body",
    "message_headers",
    "set_body",
    "set_headers",
    "with_event_id",
]

DEFAULT_TABLE_TYPE = "MANAGED_TABLE"


@dataclass(frozen=True)
class Message:
    """One notification as it goes on the wire."""

    event_id: int
    event_type: EventType
    topic: str
    headers: Mapping[str, str]
    body: str

    def body_json(self) -> dict[str, Any]:
        """The body parsed from JSON."""
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass(frozen=True)
class PartitionDetails:
    """Facts about a committed partition that its ADD_PARTITION message carries."""

    location: str | None = None
    file_count: int | None = None
    total_bytes: int | None = None
    job_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_fields(self) -> dict[str, Any]:
        """The body fields these details add (``location``, ``fileCount``, ``bytes``,
        ``jobId``, then the extras), leaving out what is unknown."""
        known = {
            "location": self.location,
            "fileCount": self.file_count,
            "bytes": self.total_bytes,
            "jobId": self.job_id,
        }
        fields = {key: value for key, value in known.items() if value is not None}
        fields.update(self.extra)
        return fields


def message_headers(
    event_type: EventType, event_id: int, table: TableName, spec: str
) -> dict[str, str]:
    """The ``HCAT_*`` JMS properties of a message (``spec`` empty for table events)."""
    return {
        HEADER_EVENT: event_type.value,
        HEADER_VERSION: MESSAGE_VERSION,
        HEADER_FORMAT: MESSAGE_FORMAT,
        HEADER_EVENT_ID: str(event_id),
        HEADER_TABLE: str(table),
        HEADER_SPEC: spec,
    }


def dump_body(body: Mapping[str, Any]) -> str:
    """A message body as it goes on the wire: compact ASCII JSON."""
    # ASCII with \u escapes: ActiveMQ 5.17 hands 4-byte UTF-8 (emoji) to OpenWire JMS
    # consumers in a form getText() rejects (AMQ-8398); escaped, every reader gets it.
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"))


def build_add_partition(
    *,
    event_id: int,
    table: TableName,
    topic: str,
    partition: PartitionSpec,
    timestamp: int,
    server: str,
    service_principal: str,
    table_type: str = DEFAULT_TABLE_TYPE,
    details: PartitionDetails | None = None,
) -> Message:
    """Build the ``ADD_PARTITION`` message for one new partition.

    Args:
        event_id: the outbox event id (``HCAT_EVENT_ID``).
        table: the table the partition belongs to.
        topic: the topic the message is published to.
        partition: the full partition spec, keys in table order.
        timestamp: epoch seconds (Hive's ``timestamp`` is in seconds).
        server: the ``server`` field (the service's host or URL).
        service_principal: the ``servicePrincipal`` field.
        table_type: Hive table type, ``MANAGED_TABLE`` by default.
        details: location, file count, bytes and job id, added as extra fields.
    """
    body: dict[str, Any] = {
        "eventType": EventType.ADD_PARTITION.value,
        "server": server,
        "servicePrincipal": service_principal,
        "db": table.db,
        "table": table.table,
        "tableType": table_type,
        "timestamp": int(timestamp),
        "partitions": [partition.as_strings()],
        "eventId": event_id,
        "spec": partition.to_path(),
    }
    if details is not None:
        body.update(details.as_fields())
    headers = message_headers(EventType.ADD_PARTITION, event_id, table, partition.to_path())
    return Message(event_id, EventType.ADD_PARTITION, topic, headers, dump_body(body))


def set_body(
    event_type: EventType, event_id: int, table: TableName, canonical: PartitionSpec, timestamp: int
) -> dict[str, Any]:
    """The fields every verdict on a set starts with (MARK_SET_DONE, SET_LATE,
    SET_REOPENED): the set as ``spec`` (keys sorted) and ``partitionSpec``."""
    return {
        "eventType": event_type.value,
        "db": table.db,
        "table": table.table,
        "timestamp": int(timestamp),
        "eventId": event_id,
        "spec": canonical.to_path(),
        "partitionSpec": canonical.as_strings(),
    }


def set_headers(
    event_type: EventType,
    event_id: int,
    table: TableName,
    canonical: PartitionSpec,
    *,
    generation: int,
    reason: str | None = None,
    rule_version: int | None = None,
) -> dict[str, str]:
    """The headers of a verdict on a set (MARK_SET_DONE, SET_LATE, SET_REOPENED): the
    common ones, ``HCAT_SET_GENERATION``, and ``HCAT_DONE_REASON`` and
    ``HCAT_RULE_VERSION`` when known."""
    headers = message_headers(event_type, event_id, table, canonical.to_path())
    headers[HEADER_SET_GENERATION] = str(generation)
    if reason is not None:
        headers[HEADER_DONE_REASON] = reason
    if rule_version is not None:
        headers[HEADER_RULE_VERSION] = str(rule_version)
    return headers


def build_mark_set_done(
    *,
    event_id: int,
    table: TableName,
    topic: str,
    spec: PartitionSpec,
    timestamp: int,
    generation: int = 1,
    reason: str = "writer",
    rule_version: int | None = None,
) -> Message:
    """Build the ``MARK_SET_DONE`` message for a (partial) spec.

    The spec is sorted by key, so that consumers can compare ``spec`` strings directly.

    Args:
        event_id: the outbox event id (``HCAT_EVENT_ID``).
        table: the table the set belongs to.
        topic: the topic the message is published to.
        spec: the completed (partial) spec; any key order.
        timestamp: epoch seconds.
        generation: the set's generation (``HCAT_SET_GENERATION``; 1 for its first done).
        reason: why it is done (``HCAT_DONE_REASON``: rule, changed, partial, writer).
        rule_version: the version of the rule that decided, if one did.
    """
    canonical = spec.sorted()
    body = set_body(EventType.MARK_SET_DONE, event_id, table, canonical, timestamp)
    body["generation"] = generation
    body["reason"] = reason
    if rule_version is not None:
        body["ruleVersion"] = rule_version
    headers = set_headers(
        EventType.MARK_SET_DONE,
        event_id,
        table,
        canonical,
        generation=generation,
        reason=reason,
        rule_version=rule_version,
    )
    return Message(event_id, EventType.MARK_SET_DONE, topic, headers, dump_body(body))


def with_event_id(
    headers: Mapping[str, str], body: str, event_id: int
) -> tuple[dict[str, str], str]:
    """The headers and body of a built message, re-announced under ``event_id``.

    Used when an undeliverable event is retried: it goes out again as a new event, so
    that consumers tracking the highest id per topic do not take it for a repeat.
    """
    renumbered = dict(headers)
    renumbered[HEADER_EVENT_ID] = str(event_id)
    parsed = json.loads(body)
    if "eventId" in parsed:
        parsed["eventId"] = event_id
    return renumbered, dump_body(parsed)
