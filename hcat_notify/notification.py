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
from enum import StrEnum
from typing import Any

from hcat_notify.broker.connection import ReceivedMessage
from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.events import (
    HEADER_DONE_REASON,
    HEADER_EVENT,
    HEADER_EVENT_ID,
    HEADER_SET_GENERATION,
    HEADER_SPEC,
    HEADER_TABLE,
    EventType,
)
from hcat_notify.model.names import TableName
from hcat_notify.model.records import ReadOnlyRecord
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


_UNSET: Any = object()


class Notification(ReadOnlyRecord):
    """One event of a followed table, of any kind, however it reached us. Read-only.

    Attributes:
        event_id: the catalog's event id.
        event_type: what happened.
        table: the table it happened to.
        spec: the ``HCAT_SPEC`` header: the partition (ADD_PARTITION, DROP_PARTITION,
            INSERT of one partition), the completed set (MARK_SET_DONE), the common
            leading spec of a batched announcement; None for CREATE_TABLE and
            DROP_TABLE and for a batch whose partitions share no leading key.
        body: the message body (Hive's JSON).
        headers: the ``HCAT_*`` headers.
        topic: the topic it was published on.
        source: where it came from.
        partitions: every partition the event names (several for a batch); empty for
            MARK_SET_DONE and table events.

    A notification read from the catalog decodes its headers, body and spec when they
    are first read: catch-up hands out 100,000s, and many callers look at the id and
    the type only.
    """

    FIELDS = (
        "event_id",
        "event_type",
        "table",
        "spec",
        "body",
        "headers",
        "topic",
        "source",
        "partitions",
    )

    event_id: int
    event_type: EventType
    table: TableName
    topic: str
    source: Source
    _spec: Any  # PartitionSpec | None, or _UNSET until first read
    _body: Any  # a mapping, or the stored JSON text until first read
    headers: Mapping[str, str]
    _partitions: Any  # tuple[PartitionSpec, ...], or _UNSET until first read

    def __init__(
        self,
        *,
        event_id: int,
        event_type: EventType,
        table: TableName,
        spec: PartitionSpec | None,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        topic: str,
        source: Source,
        partitions: tuple[PartitionSpec, ...] = (),
    ) -> None:
        self._fill(
            {
                "event_id": event_id,
                "event_type": event_type,
                "table": table,
                "topic": topic,
                "source": source,
                "_spec": spec,
                "_body": body,
                "headers": headers,
                "_partitions": partitions,
            }
        )

    @property
    def spec(self) -> PartitionSpec | None:
        spec = self._spec
        if spec is _UNSET:
            path = self.headers.get(HEADER_SPEC, "")
            # The catalog wrote this path from a validated spec: no need to check it again.
            spec = PartitionSpec.parse_trusted(path) if path else None
            self.__dict__["_spec"] = spec
        return spec  # type: ignore[no-any-return]

    @property
    def body(self) -> Mapping[str, Any]:
        body = self._body
        if isinstance(body, str):
            body = trusted_json(body)
            self.__dict__["_body"] = body
        return body  # type: ignore[no-any-return]

    @property
    def partitions(self) -> tuple[PartitionSpec, ...]:
        partitions = self._partitions
        if partitions is _UNSET:
            partitions = _partitions(self.event_type, self.spec, self.body)
            self.__dict__["_partitions"] = partitions
        return partitions  # type: ignore[no-any-return]

    def replace(self, **changes: Any) -> Notification:
        """A copy with the given fields changed (what ``dataclasses.replace`` does).

        Raises:
            TypeError: a name that is not a field.
        """
        unknown = sorted(set(changes) - set(self.FIELDS))
        if unknown:
            raise TypeError(f"Notification has no field {', '.join(map(repr, unknown))}")
        fields = {name: getattr(self, name) for name in self.FIELDS}
        fields.update(changes)
        return Notification(**fields)

    @property
    def about_table(self) -> bool:
        """Whether this is a table event (CREATE_TABLE, DROP_TABLE)."""
        return self.event_type.about_table

    @property
    def batch(self) -> Mapping[str, int] | None:
        """``part``, ``parts`` and ``partitionCount`` of a batched announcement, else None."""
        batch = self.body.get("batch")
        return batch if isinstance(batch, Mapping) else None

    @property
    def generation(self) -> int | None:
        """The set generation of a verdict on a set (MARK_SET_DONE, SET_LATE,
        SET_REOPENED; ``HCAT_SET_GENERATION``): 1 for a set's first done, 1 for a done
        from before completeness rules; None for other events."""
        if not self.event_type.about_set:
            return None
        given = self.headers.get(HEADER_SET_GENERATION)
        if given is None:
            given = self.body.get("generation")
        try:
            return int(given) if given is not None else 1
        except (TypeError, ValueError):
            return 1

    @property
    def reason(self) -> str | None:
        """Why a MARK_SET_DONE was sent (``HCAT_DONE_REASON``: rule, changed, partial,
        writer), None for other events and dones from before completeness rules."""
        if self.event_type is not EventType.MARK_SET_DONE:
            return None
        given = self.headers.get(HEADER_DONE_REASON) or self.body.get("reason")
        return str(given) if given else None

    @property
    def missing(self) -> tuple[str, ...]:
        """The missing parts (full path forms, at most 1,000) a SET_LATE or SET_REOPENED
        lists; empty for other events."""
        listed = self.body.get("missing") if self.event_type.about_set else None
        return tuple(str(item) for item in listed) if isinstance(listed, list) else ()

    def describe(self) -> str:
        """What the event is about, in one short field (``hcat-notify watch``): the spec,
        ``N partitions under SPEC (part P/PS)`` for a batch, ``-`` for a table event, the
        set with its generation and reason (a done of a rule or a later generation) or
        its missing count (SET_LATE, SET_REOPENED), the rule's version for a SET_RULE."""
        if self.event_type is EventType.SET_RULE:
            version = self.body.get("ruleVersion")
            return f"rule version {version}" + (" removed" if self.body.get("rule") is None else "")
        if self.about_table:
            return "-"
        if self.event_type.about_set and self.spec is not None:
            return self._describe_set(self.spec)
        if len(self.partitions) <= 1:
            return str(self.spec) if self.spec is not None else "-"
        batch = self.batch
        text = f"{len(self.partitions)} partitions"
        if self.spec is not None:
            text += f" under {self.spec}"
        if batch is not None and batch.get("parts", 1) > 1:
            text += f" (part {batch.get('part')}/{batch.get('parts')})"
        return text

    def _describe_set(self, spec: PartitionSpec) -> str:
        generation, reason = self.generation, self.reason
        if self.event_type is EventType.MARK_SET_DONE:
            if generation == 1 and reason in (None, "writer"):
                return str(spec)  # as before completeness rules
            return f"{spec} generation {generation} ({reason})"
        count = self.body.get("missingCount")
        missing = f", {count} missing" if isinstance(count, int) else ""
        return f"{spec} generation {generation}{missing}"

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
    """A notification of an event read from the catalog (decoded when first read)."""
    return Notification.trusted(
        {
            "event_id": event.event_id,
            "event_type": event.event_type,
            "table": _parse_table(event.table),
            "topic": event.topic,
            "source": source,
            "_spec": _UNSET,
            "_body": event.body,
            "headers": event.headers,
            "_partitions": _UNSET,
        }
    )


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
