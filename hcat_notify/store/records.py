"""What the catalog hands out: immutable records of tables, partitions, dones, events.

Decoding a row into a record lives here too, written against plain column values (as
any DB-API driver returns them), so that the SQLAlchemy store and the stdlib fast path
(:mod:`hcat_notify.store.quick`) read a row the same way. Nothing here imports
SQLAlchemy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, overload

from hcat_notify.errors import TableDroppedError, TableNotFoundError
from hcat_notify.model.events import EVENT_TYPES, EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.records import ReadOnlyRecord
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import Message

if TYPE_CHECKING:
    from hcat_notify.store.models import TableRow

__all__ = [
    "DEFAULT_RETENTION",
    "MAX_RETENTION",
    "CommitRecord",
    "JournalEntry",
    "JournalState",
    "Lease",
    "NewPartition",
    "OutboxEvent",
    "OutboxPage",
    "PartitionInfo",
    "RefusedEvent",
    "RetainedDone",
    "StoredJson",
    "TableActivity",
    "TableDrop",
    "TableInfo",
    "WriteMode",
    "as_datetime",
    "as_json",
    "as_table_name",
    "info_of",
    "outbox_event",
    "outbox_events",
    "stored_mapping",
    "table_dropped",
    "table_info",
    "table_not_found",
    "trusted_json",
]

DEFAULT_RETENTION = timedelta(days=7)
MAX_RETENTION = timedelta(days=36_500)
"""A hundred years: any longer and ``now + retention`` leaves what datetimes can hold."""


def as_table_name(table: TableName | str) -> TableName:
    """``table`` as a :class:`TableName` (parsing ``db.table``)."""
    return table if isinstance(table, TableName) else TableName.parse(table)


@dataclass(frozen=True)
class TableDrop:
    """A table's drop: its DROP_TABLE event on the table's own topic."""

    event_id: int
    topic: str


def table_dropped(name: TableName, drop: TableDrop) -> TableDroppedError:
    """The error for a table that is not registered because it was dropped."""
    return TableDroppedError(
        f"table {name} was dropped (event {drop.event_id})",
        event_id=drop.event_id,
        topic=drop.topic,
    )


def table_not_found(name: TableName) -> TableNotFoundError:
    """The error for a table that is not registered."""
    return TableNotFoundError(
        f"table {name} is not registered (create it with 'hcat-notify table create')"
    )


def as_json(value: Any) -> Any:
    """A JSON column's value: drivers return it decoded (PostgreSQL) or as text (SQLite)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


_DECODER = json.JSONDecoder()


def trusted_json(value: Any) -> Any:
    """A JSON column the catalog wrote itself, decoded with the least work.

    ``json.dumps`` writes no surrounding whitespace, so the scanner can start at once
    (``json.loads`` spends half its time on a small document matching whitespace around
    it). Text that is not such a document goes through ``json.loads``, which raises the
    usual error; a value the driver decoded already is returned as it is.
    """
    if isinstance(value, str):
        try:
            decoded, end = _DECODER.raw_decode(value)
        except ValueError:
            return json.loads(value)
        return decoded if end == len(value) else json.loads(value)
    return as_json(value)


class StoredJson(Mapping[str, Any]):
    """A JSON object column the catalog wrote itself, decoded when first read.

    The relay and catch-up read 100,000s of rows and most of them are never looked
    into (catch-up hands out the event id first); the text is decoded with
    :func:`trusted_json` on first access, once. Read-only, like the mapping it stands for.
    """

    __slots__ = ("_text", "_value")

    def __init__(self, text: str) -> None:
        self._text = text
        self._value: Mapping[str, Any] | None = None

    def _decoded(self) -> Mapping[str, Any]:
        value = self._value
        if value is None:
            decoded = trusted_json(self._text)
            if not isinstance(decoded, Mapping):
                raise TypeError(f"not a JSON object: {self._text[:80]!r}")
            value = self._value = decoded
        return value

    @property
    def text(self) -> str:
        """The stored JSON text, as written."""
        return self._text

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(dict(self._decoded()))


def stored_mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object column as a read-only mapping: lazily decoded text (SQLite, or a
    column cast to text), or the mapping a driver decoded already (PostgreSQL json)."""
    if isinstance(value, str):
        return StoredJson(value)
    return MappingProxyType(dict(as_json(value)))


def as_datetime(value: Any) -> datetime:
    """A timestamp column's value as an aware UTC datetime (SQLite stores naive text)."""
    if isinstance(value, str):
        try:  # SQLite's naive UTC text: parsed as UTC at once (replace() costs more)
            return datetime.fromisoformat(value + "+00:00")
        except ValueError:
            value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class TableInfo:
    """A registered table, as read from the catalog."""

    name: TableName
    location: str
    storage_format: str
    partition_keys: tuple[str, ...]
    table_type: str
    properties: Mapping[str, str]
    retention: timedelta
    topic: str
    created_at: datetime
    updated_at: datetime
    version: int
    prefix_topic: str | None = None
    """Where the table's CREATE_TABLE and DROP_TABLE go (None: the settings' prefix)."""
    rule_version: int | None = None
    """The version of the table's completeness rule (None: it has none)."""

    def spec(
        self, values: Mapping[str, str | None] | PartitionSpec, *, partial: bool
    ) -> PartitionSpec:
        """Validate ``values`` against this table's keys; return it in table key order."""
        spec = values if isinstance(values, PartitionSpec) else PartitionSpec.from_mapping(values)
        return spec.for_table(self.partition_keys, table=str(self.name), partial=partial)

    def covering_spec(self, values: Mapping[str, str | None] | PartitionSpec) -> PartitionSpec:
        """Validate ``values`` as a spec a done is looked up for (a prefix of this table's
        keys, see :meth:`PartitionSpec.for_covering`); return it in table key order."""
        spec = values if isinstance(values, PartitionSpec) else PartitionSpec.from_mapping(values)
        return spec.for_covering(self.partition_keys, table=str(self.name))

    def done_spec(self, values: Mapping[str, str | None] | PartitionSpec) -> PartitionSpec:
        """Validate ``values`` as a mark-set-done of this table (a prefix of its keys, see
        :meth:`PartitionSpec.for_done`); return it with keys sorted, as on the wire."""
        spec = values if isinstance(values, PartitionSpec) else PartitionSpec.from_mapping(values)
        return spec.for_done(self.partition_keys, table=str(self.name))


TABLE_COLUMNS = (
    "id",
    "db_name",
    "table_name",
    "location",
    "storage_format",
    "partition_keys",
    "table_type",
    "properties",
    "retention_seconds",
    "topic",
    "created_at",
    "updated_at",
    "version",
    "prefix_topic",
    "rule_version",
)
"""The columns :func:`table_info` reads, in this order."""


def table_info(row: Mapping[str, Any]) -> TableInfo:
    """A table's record from its row (a mapping of :data:`TABLE_COLUMNS`)."""
    return TableInfo(
        name=TableName(row["db_name"], row["table_name"]),
        location=row["location"],
        storage_format=row["storage_format"],
        partition_keys=tuple(as_json(row["partition_keys"])),
        table_type=row["table_type"],
        properties=MappingProxyType(dict(as_json(row["properties"]))),
        retention=timedelta(seconds=row["retention_seconds"]),
        topic=row["topic"],
        created_at=as_datetime(row["created_at"]),
        updated_at=as_datetime(row["updated_at"]),
        version=row["version"],
        prefix_topic=row.get("prefix_topic"),
        rule_version=row.get("rule_version"),
    )


def info_of(row: TableRow) -> TableInfo:
    """The record of an ORM table row."""
    return table_info({column: getattr(row, column) for column in TABLE_COLUMNS})


@dataclass(frozen=True)
class PartitionInfo:
    """A registered partition."""

    table: TableName
    spec: PartitionSpec
    location: str
    job_id: str | None
    file_count: int
    total_bytes: int
    archived: bool
    event_id: int | None
    created_at: datetime
    updated_at: datetime
    version: int


@dataclass(frozen=True)
class NewPartition:
    """A partition to register, or as a write leaves it: its full spec and its files."""

    spec: PartitionSpec | Mapping[str, str | None]
    location: str
    file_count: int = 0
    total_bytes: int = 0
    archived: bool = False
    files: tuple[str, ...] = ()
    """Locations of the files the write added (the ``files`` of an INSERT message)."""


@dataclass(frozen=True)
class RetainedDone:
    """A retained MARK_SET_DONE message."""

    event_id: int
    table: TableName
    spec: PartitionSpec
    created_at: datetime
    expires_at: datetime
    generation: int = 1
    """The set's generation (``HCAT_SET_GENERATION``; 1: its first done)."""
    reason: str | None = None
    """Why it was sent (rule, changed, partial, writer; None: before completeness rules)."""


@dataclass(frozen=True)
class TableActivity:
    """A table with its last partition (in key order) and newest retained done."""

    table: TableInfo
    last_partition: str | None
    last_partition_at: datetime | None
    last_done: str | None
    last_done_at: datetime | None
    last_done_event_id: int | None


class OutboxEvent(ReadOnlyRecord):
    """An event waiting in (or published from) the outbox. Read-only.

    Attributes:
        event_id: its id (global, increasing in commit order).
        topic: the topic it is published on.
        event_type: what happened.
        table: ``db.table``.
        headers: the message's ``HCAT_*`` headers.
        body: the message body (JSON text).
        created_at: when it was written (UTC).
        bucket: the relay bucket of its topic.

    A record of a row the catalog wrote itself decodes its headers and time when they
    are first read (the relay and catch-up read 100,000s of rows).
    """

    event_id: int
    topic: str
    event_type: EventType
    table: str
    headers: Mapping[str, str]
    body: str
    bucket: int
    _created_at: Any  # datetime, or SQLite's stored text until first read

    FIELDS = ("event_id", "topic", "event_type", "table", "headers", "body", "created_at", "bucket")

    def __init__(
        self,
        *,
        event_id: int,
        topic: str,
        event_type: EventType,
        table: str,
        headers: Mapping[str, str],
        body: str,
        created_at: datetime,
        bucket: int = 0,
    ) -> None:
        values = (event_id, topic, event_type, table, headers, body, created_at, bucket)
        self._fill(dict(zip(_STORED, values, strict=True)))

    def message(self) -> Message:
        """The event as the wire message it is published as."""
        return Message(self.event_id, self.event_type, self.topic, self.headers, self.body)

    @property
    def created_at(self) -> datetime:
        value = self._created_at
        if not isinstance(value, datetime):
            value = self.__dict__["_created_at"] = as_datetime(value)
        return value


_STORED = ("event_id", "topic", "event_type", "table", "headers", "body", "_created_at", "bucket")
"""The keys of an :class:`OutboxEvent`'s instance dict (the time is decoded late)."""


def outbox_event(
    event_id: int,
    topic: str,
    event_type: str,
    table: str,
    headers: Any,
    body: str,
    created_at: Any,
    bucket: int,
    *,
    lazy: bool = False,
) -> OutboxEvent:
    """An :class:`OutboxEvent` from the plain column values of an outbox row.

    A trusted constructor for rows the catalog wrote itself (the relay and catch-up read
    100,000s): no checks, and the time is decoded when first read. ``headers`` (the
    stored JSON text, or the mapping a driver decoded) are decoded at once, for the
    relay, which sends them all; ``lazy`` decodes them when first read, for catch-up,
    whose callers mostly never do.
    """
    return OutboxEvent.trusted(
        {
            "event_id": event_id,
            "topic": topic,
            "event_type": EVENT_TYPES[event_type],
            "table": table,
            "headers": stored_mapping(headers) if lazy else MappingProxyType(trusted_json(headers)),
            "body": body,
            "_created_at": created_at,
            "bucket": bucket,
        }
    )


def outbox_events(rows: Sequence[tuple[Any, ...]]) -> list[OutboxEvent]:
    """:func:`outbox_event` of each row, the headers of all decoded in one go (the relay
    reads pages of thousands: one ``json.loads`` of them all costs half of one each)."""
    texts = [row[4] for row in rows]
    decoded: Any = None
    if texts and all(isinstance(text, str) for text in texts):
        try:
            decoded = json.loads(f"[{','.join(texts)}]")
        except ValueError:
            decoded = None  # one is not a single document: each on its own, to say which
    if decoded is None or len(decoded) != len(rows) or not all(type(h) is dict for h in decoded):
        return [outbox_event(*row) for row in rows]
    # outbox_event's record, built here: its calls per event (the record, its
    # trusted_json and _fill) cost as much as building the record itself
    new, fill, kinds, frozen = object.__new__, object.__setattr__, EVENT_TYPES, MappingProxyType
    events = []
    for (event_id, topic, event_type, table, _, body, created_at, bucket), headers in zip(
        rows, decoded, strict=True
    ):
        event = new(OutboxEvent)
        fill(
            event,
            "__dict__",
            {
                "event_id": event_id,
                "topic": topic,
                "event_type": kinds[event_type],
                "table": table,
                "headers": frozen(headers),
                "body": body,
                "_created_at": created_at,
                "bucket": bucket,
            },
        )
        events.append(event)
    return events


class OutboxPage(Sequence[OutboxEvent]):
    """Events read from the outbox, in event-id order; each is built when asked for.

    The page keeps the rows as plain tuples of column values, which the garbage
    collector stops tracking: a consumer's catch-up holds 5,000-row pages while it hands
    them out, and 5,000 live records each would make the collector scan the whole heap
    every few pages. Indexing builds a new :class:`OutboxEvent` each time.
    """

    __slots__ = ("_rows",)

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> OutboxEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[OutboxEvent]: ...

    def __getitem__(self, index: int | slice) -> OutboxEvent | list[OutboxEvent]:
        if isinstance(index, slice):
            return [outbox_event(*row, lazy=True) for row in self._rows[index]]
        return outbox_event(*self._rows[index], lazy=True)

    def __iter__(self) -> Iterator[OutboxEvent]:
        for row in self._rows:
            yield outbox_event(*row, lazy=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OutboxPage({len(self._rows)} events)"


@dataclass(frozen=True)
class RefusedEvent:
    """An event the broker refused for itself (not for an outage).

    ``parked_at`` is None while the relay still tries it; once set, the event is parked
    as undeliverable: kept, shown by ``hcat-notify status``, sent only if retried.
    """

    event_id: int
    topic: str
    table: str
    event_type: EventType
    reason: str
    attempts: int
    parked_at: datetime | None


@dataclass(frozen=True)
class Lease:
    """Ownership of a named resource (the outbox) until ``expires_at``."""

    name: str
    owner: str
    acquired_at: datetime
    expires_at: datetime
    version: int


class WriteMode(StrEnum):
    """How a write treats partitions that exist already."""

    APPEND = "append"  # add files beside the existing ones
    OVERWRITE = "overwrite"  # replace the partition's files


class JournalState(StrEnum):
    """Where a journalled write stands."""

    PENDING = "pending"  # claimed; files may be moving
    COMMITTED = "committed"  # registered and announced
    ABORTED = "aborted"  # given up; its moves were (or must be) undone


@dataclass(frozen=True)
class JournalEntry:
    """A write recorded in the commit journal."""

    job_id: str
    table: TableName
    mode: WriteMode
    state: JournalState
    partitions: tuple[str, ...]
    plan: Mapping[str, Any]
    started_at: datetime
    result: Mapping[str, Any] | None
    version: int
    creates_table: bool = False
    """The write registers its table when it completes (an import into a new table)."""
    table_definition: Mapping[str, Any] | None = None
    """With ``creates_table``: the definition it registers (``table_definition`` of
    :meth:`CommitJournal.begin`; recovery checks the plan's paths against its location)."""


@dataclass(frozen=True)
class CommitRecord:
    """What a completed write registered and announced."""

    job_id: str
    created: tuple[str, ...]
    replaced: tuple[str, ...]
    appended: tuple[str, ...]
    event_ids: tuple[int, ...]
    done_event_id: int | None = None
    insert_event_ids: tuple[int, ...] = ()
    """The INSERT events of the replaced and appended partitions."""
    table_event_ids: tuple[int, ...] = ()
    """The CREATE_TABLE event, when the write registered its table (an import)."""
    set_done_event_ids: tuple[int, ...] = ()
    """The MARK_SET_DONE events the table's completeness rule wrote for the sets the
    write completed (``done_event_id`` is the one asked for, else the last of these)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form kept in the journal."""
        return {
            "job_id": self.job_id,
            "created": list(self.created),
            "replaced": list(self.replaced),
            "appended": list(self.appended),
            "event_ids": list(self.event_ids),
            "done_event_id": self.done_event_id,
            "insert_event_ids": list(self.insert_event_ids),
            "table_event_ids": list(self.table_event_ids),
            "set_done_event_ids": list(self.set_done_event_ids),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitRecord:
        """Read back :meth:`as_dict`."""
        return cls(
            job_id=str(data["job_id"]),
            created=tuple(data.get("created", ())),
            replaced=tuple(data.get("replaced", ())),
            appended=tuple(data.get("appended", ())),
            event_ids=tuple(int(item) for item in data.get("event_ids", ())),
            done_event_id=data.get("done_event_id"),
            insert_event_ids=tuple(int(item) for item in data.get("insert_event_ids", ())),
            table_event_ids=tuple(int(item) for item in data.get("table_event_ids", ())),
            set_done_event_ids=tuple(int(item) for item in data.get("set_done_event_ids", ())),
        )
