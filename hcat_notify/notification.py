"""One notification as a consumer sees it, decoded from the wire or the catalog's outbox.

Every kind of event is a :class:`Notification`: a partition's (``ADD_PARTITION``,
``DROP_PARTITION``, ``INSERT``), a set's (``MARK_SET_DONE``) and a table's
(``CREATE_TABLE``, ``DROP_TABLE``). ``spec`` is the ``HCAT_SPEC`` header: the partition
of a one-partition event, the set of a done, the common leading spec of a batched
announcement (``announce="write"``) — and None where there is none (table events, a
batch whose partitions share no leading key). ``partitions`` lists every partition the
event names, read from the body's ``partitions`` (Hive's list).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hcat_notify.broker.connection import ReceivedMessage
from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.events import (
    HEADER_EVENT,
    HEADER_EVENT_ID,
    HEADER_SPEC,
    HEADER_TABLE,
    EventType,
)
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import DEFAULT_PARTITION_NAME, PartitionSpec
from hcat_notify.store.records import OutboxEvent, trusted_json

__all__ = ["Notification", "Source", "from_message", "from_outbox"]

logger = logging.getLogger(__name__)

_LISTS_PARTITIONS = (EventType.ADD_PARTITION, EventType.DROP_PARTITION)


class Source(StrEnum):
    """Where a notification came from."""

    RETAINED = "retained"  # the mark-set-done retention table, at start-up
    REGISTRY = "registry"  # the catalog's events after the cursor, at start-up
    LIVE = "live"  # the broker


@dataclass(frozen=True)
class Notification:
    """One event of a followed table, of any kind, however it reached us.

    Attributes:
        spec: the ``HCAT_SPEC`` header: the partition (ADD_PARTITION, DROP_PARTITION,
            INSERT of one partition), the completed set (MARK_SET_DONE), the common
            leading spec of a batched announcement; None for CREATE_TABLE and
            DROP_TABLE and for a batch whose partitions share no leading key.
        partitions: every partition the event names (several for a batch); empty for
            MARK_SET_DONE and table events.
    """

    event_id: int
    event_type: EventType
    table: TableName
    spec: PartitionSpec | None
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    topic: str
    source: Source
    partitions: tuple[PartitionSpec, ...] = ()

    @property
    def about_table(self) -> bool:
        """Whether this is a table event (CREATE_TABLE, DROP_TABLE)."""
        return self.event_type.about_table

    @property
    def batch(self) -> Mapping[str, int] | None:
        """``part``, ``parts`` and ``partitionCount`` of a batched announcement, else None."""
        batch = self.body.get("batch")
        return batch if isinstance(batch, Mapping) else None

    def describe(self) -> str:
        """What the event is about, in one short field (``hcat-notify watch``): the spec,
        ``N partitions under SPEC (part P/PS)`` for a batch, ``-`` for a table event."""
        if self.about_table:
            return "-"
        if len(self.partitions) <= 1:
            return str(self.spec) if self.spec is not None else "-"
        batch = self.batch
        text = f"{len(self.partitions)} partitions"
        if self.spec is not None:
            text += f" under {self.spec}"
        if batch is not None and batch.get("parts", 1) > 1:
            text += f" (part {batch.get('part')}/{batch.get('parts')})"
        return text

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``hcat-notify watch --json``)."""
        return {
            "event_id": self.event_id,
            "event": self.event_type.value,
            "table": str(self.table),
            "spec": self.spec.to_path() if self.spec is not None else None,
            "partitions": [partition.to_path() for partition in self.partitions],
            "topic": self.topic,
            "source": self.source.value,
            "headers": dict(self.headers),
            "body": dict(self.body),
        }


@functools.lru_cache(maxsize=65_536)
def _parse_spec(path: str) -> PartitionSpec:
    return PartitionSpec.parse(path)


@functools.lru_cache(maxsize=4096)
def _parse_table(name: str) -> TableName:
    return TableName.parse(name)


def _partitions(
    event_type: EventType, spec: PartitionSpec | None, body: Mapping[str, Any]
) -> tuple[PartitionSpec, ...]:
    if event_type is EventType.INSERT:
        return (spec,) if spec is not None else ()
    if event_type not in _LISTS_PARTITIONS:
        return ()
    listed = body["partitions"]
    if not isinstance(listed, list):
        raise ValueError("'partitions' is not a list")
    if len(listed) == 1 and spec is not None and len(spec) == len(listed[0]):
        return (spec,)  # one partition: the header says it already
    return tuple(
        PartitionSpec.from_mapping(
            {key: None if value == DEFAULT_PARTITION_NAME else value for key, value in item.items()}
        )
        for item in listed
    )


def from_outbox(event: OutboxEvent, source: Source) -> Notification:
    """A notification of an event read from the catalog."""
    # The catalog wrote this spec from a validated one: no need to check it again.
    # A trusted constructor too: the fields are set at once (a frozen dataclass assigns
    # them one by one), and catch-up builds 100,000s of these.
    headers = dict(event.headers)
    path = headers.get(HEADER_SPEC, "")
    spec = PartitionSpec.parse_trusted(path) if path else None
    body = trusted_json(event.body)
    notification = object.__new__(Notification)
    object.__setattr__(
        notification,
        "__dict__",
        {
            "event_id": event.event_id,
            "event_type": event.event_type,
            "table": _parse_table(event.table),
            "spec": spec,
            "body": body,
            "headers": headers,
            "topic": event.topic,
            "source": source,
            "partitions": _partitions(event.event_type, spec, body),
        },
    )
    return notification


def from_message(message: ReceivedMessage) -> Notification | None:
    """A notification of a message from the broker, or None (logged) if it is malformed."""
    headers = message.headers
    try:
        event_type = EventType(headers[HEADER_EVENT])
        path = headers[HEADER_SPEC]
        spec = _parse_spec(path) if path else None
        if spec is None and not event_type.about_table and event_type not in _LISTS_PARTITIONS:
            raise ValueError(f"a {event_type} message without {HEADER_SPEC}")
        body = json.loads(message.body)
        return Notification(
            event_id=int(headers[HEADER_EVENT_ID]),
            event_type=event_type,
            table=_parse_table(headers[HEADER_TABLE]),
            spec=spec,
            body=body,
            headers={key: value for key, value in headers.items() if key.startswith("HCAT_")},
            topic=message.destination.removeprefix("/topic/"),
            source=Source.LIVE,
            partitions=_partitions(event_type, spec, body),
        )
    except (KeyError, ValueError, TypeError, AttributeError, HcatNotifyError) as exc:
        logger.warning("consumer ignored a malformed message on %s: %s", message.destination, exc)
        return None
