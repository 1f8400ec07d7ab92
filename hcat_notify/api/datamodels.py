"""What the HTTP API sends and takes: pydantic models, apart from the routes.

JSON names are camelCase (``eventId``, ``partitionKeys``), as in Hive's messages; times
are ISO 8601 in UTC. Request bodies refuse unknown fields, so a misspelt field is an
error instead of a silent default. Each response model has a ``of_*`` constructor from
the catalog's record, so the routes never build JSON by hand, and each response model a
client decodes has a ``to_*`` method back to that record, so the client never reads JSON
by hand either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from hcat_notify.model.changes import ANNOUNCE_PROPERTY, AnnounceMode
from hcat_notify.model.events import HEADER_SPEC, EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import destination_for
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    MAX_RETENTION,
    NewPartition,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
    as_datetime,
)

if TYPE_CHECKING:
    # The lifecycle results (sqlalchemy, pyarrow) are imported when a client decodes one.
    from hcat_notify.lifecycle import Discovery as Discovered
    from hcat_notify.lifecycle import Purge
    from hcat_notify.store.table_changes import DroppedPartitions, DroppedTable, Registration

__all__ = [
    "MAX_NEW_PARTITIONS",
    "Announce",
    "CoveringDone",
    "CreateTable",
    "Discover",
    "DiscoveredPartition",
    "Discovery",
    "DoneRecorded",
    "Event",
    "EventPage",
    "EventRecorded",
    "ForeignPath",
    "Health",
    "LastEvent",
    "MarkDone",
    "NewPartitionItem",
    "NewPartitions",
    "Partition",
    "PartitionList",
    "PartitionPage",
    "PartitionsDropped",
    "Problem",
    "Readiness",
    "RegisterPartitionItem",
    "RegisterPartitions",
    "Registered",
    "Table",
    "TableDropped",
    "TableList",
]

MAX_NEW_PARTITIONS = 1000
"""Partitions one request may register (Hive's default ``max_partitions`` of a write)."""

SpecValues = dict[str, str | None]
Announce = Literal["partition", "write"]


def announce_mode_of(given: Announce | None) -> AnnounceMode | None:
    """The store's announce mode of a request's ``announce`` (None: the table's)."""
    return None if given is None else AnnounceMode(given)


"""How new (or dropped) partitions are announced: one ADD_PARTITION each, or one per
write listing them all (split under the byte cap)."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class _Request(_Model):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class Problem(BaseModel):
    """An RFC 9457 problem document (``application/problem+json``)."""

    type: str = Field(
        "about:blank", description="URI naming the kind of problem: urn:hcat-notify:problem:..."
    )
    title: str = Field(description="The HTTP status phrase.")
    status: int
    detail: str = Field(description="What went wrong, naming the input at fault.")
    instance: str | None = Field(
        None, description="The request path (absent when the request line was unreadable)."
    )
    error: str | None = Field(
        None,
        description="The hcat_notify exception class (clients raise the same type); for "
        "an error of the HTTP layer itself, InvalidInputError (4xx) or ApiUnavailableError "
        "(503).",
    )


class Health(_Model):
    status: Literal["ok"] = "ok"


class Readiness(_Model):
    status: Literal["ready", "not ready"]
    checks: dict[str, str] = Field(description="Each check: 'ok' or why it failed.")


class Table(_Model):
    """A registered table, with where its messages go."""

    name: str = Field(description="db.table")
    db: str
    table: str
    location: str
    format: str
    partition_keys: list[str]
    table_type: str
    properties: dict[str, str]
    retention_seconds: float
    topic: str
    destination: str = Field(description="The STOMP destination: /topic/<topic>.")
    created_at: datetime
    updated_at: datetime
    version: int
    rule_version: int | None = Field(
        default=None, description="The version of its completeness rule (null: none)."
    )

    @classmethod
    def of_table(cls, info: TableInfo) -> Table:
        return cls(
            name=str(info.name),
            db=info.name.db,
            table=info.name.table,
            location=info.location,
            format=info.storage_format,
            partition_keys=list(info.partition_keys),
            table_type=info.table_type,
            properties=dict(info.properties),
            retention_seconds=info.retention.total_seconds(),
            topic=info.topic,
            destination=destination_for(info.topic),
            created_at=info.created_at,
            updated_at=info.updated_at,
            version=info.version,
            rule_version=info.rule_version,
        )

    def to_table(self) -> TableInfo:
        return TableInfo(
            name=TableName(self.db, self.table),
            location=self.location,
            storage_format=self.format,
            partition_keys=tuple(self.partition_keys),
            table_type=self.table_type,
            properties=MappingProxyType(dict(self.properties)),
            retention=timedelta(seconds=self.retention_seconds),
            topic=self.topic,
            created_at=as_datetime(self.created_at),
            updated_at=as_datetime(self.updated_at),
            version=self.version,
            rule_version=self.rule_version,
        )


class TableList(_Model):
    tables: list[Table]
    next: str | None = Field(
        default=None, description="Pass as after= for the next page; null on the last page."
    )


class CreateTable(_Request):
    """A table to register (``hcat-notify table create``)."""

    name: str = Field(description="db.table", examples=["web.clicks"])
    location: str = Field(description="The table's root directory or URI.")
    partition_keys: list[str] = Field(min_length=1, max_length=16)
    format: Literal["parquet", "orc", "csv", "json"] = "parquet"
    table_type: Literal["MANAGED_TABLE", "EXTERNAL_TABLE"] = "MANAGED_TABLE"
    properties: dict[str, str] = Field(default_factory=dict)
    retention_seconds: float = Field(
        DEFAULT_RETENTION.total_seconds(),
        ge=1,
        le=MAX_RETENTION.total_seconds(),
        description="How long mark-set-done messages are retained.",
    )
    topic: str | None = Field(None, description="Topic override (hcat.msgbus.topic.name).")
    announce: Announce | None = Field(
        None,
        description=f"The table's announce mode (table property {ANNOUNCE_PROPERTY}); "
        "default partition.",
    )

    @model_validator(mode="after")
    def _one_announce_mode(self) -> CreateTable:
        given = self.properties.get(ANNOUNCE_PROPERTY)
        if self.announce is not None and given is not None and given != self.announce:
            raise ValueError(
                f"announce is {self.announce!r} but properties set {ANNOUNCE_PROPERTY} to "
                f"{given!r}; give one"
            )
        return self

    @property
    def retention(self) -> timedelta:
        return timedelta(seconds=self.retention_seconds)

    @property
    def table_properties(self) -> dict[str, str]:
        """``properties``, with ``announce`` as the table property it is."""
        if self.announce is None:
            return dict(self.properties)
        return {**self.properties, ANNOUNCE_PROPERTY: self.announce}


class Partition(_Model):
    """A registered partition."""

    spec: str = Field(description="Path form k1=v1/k2=v2 (escaped as Hive escapes).")
    values: SpecValues = Field(description="Raw values by key (null: the default partition).")
    location: str
    file_count: int
    total_bytes: int
    archived: bool
    job_id: str | None
    event_id: int | None
    created_at: datetime
    updated_at: datetime
    version: int = Field(
        description="1 when registered, one more with each change of its location or "
        "sizes (a compaction's)."
    )

    @classmethod
    def of_partition(cls, partition: PartitionInfo) -> Partition:
        return cls(
            spec=partition.spec.to_path(),
            values=partition.spec.as_dict(),
            location=partition.location,
            file_count=partition.file_count,
            total_bytes=partition.total_bytes,
            archived=partition.archived,
            job_id=partition.job_id,
            event_id=partition.event_id,
            created_at=partition.created_at,
            updated_at=partition.updated_at,
            version=partition.version,
        )

    def to_partition(self, table: TableName) -> PartitionInfo:
        return PartitionInfo(
            table=table,
            spec=PartitionSpec.parse_trusted(self.spec),
            location=self.location,
            job_id=self.job_id,
            file_count=self.file_count,
            total_bytes=self.total_bytes,
            archived=self.archived,
            event_id=self.event_id,
            created_at=as_datetime(self.created_at),
            updated_at=as_datetime(self.updated_at),
            version=self.version,
        )


def _partitions_of(table: str, partitions: Sequence[Partition]) -> tuple[PartitionInfo, ...]:
    name = TableName.parse(table)
    return tuple(partition.to_partition(name) for partition in partitions)


class PartitionPage(_Model):
    partitions: list[Partition]
    next: str | None = Field(description="Pass as after= for the next page; null on the last page.")


class PartitionList(_Model):
    partitions: list[Partition]


class NewPartitionItem(_Request):
    spec: SpecValues = Field(description="Every partition key with its raw value.")
    location: str
    file_count: Annotated[int, Field(ge=0)] = 0
    total_bytes: Annotated[int, Field(ge=0)] = 0


class NewPartitions(_Request):
    """Partitions to register and announce (ADD_PARTITION: one each, or batched for a
    table with announce mode write), all or none. The sizes are taken as given."""

    partitions: list[NewPartitionItem] = Field(min_length=1, max_length=MAX_NEW_PARTITIONS)
    job_id: str | None = Field(None, max_length=128)


class RegisterPartitionItem(_Request):
    spec: SpecValues = Field(description="Every partition key with its raw value.")
    location: str = Field(
        min_length=1,
        description="Directory (path or URI) that holds the files, as the server sees it.",
    )


class RegisterPartitions(_Request):
    """Partitions whose files are already in place (``hcat-notify partitions add``): the
    server counts and measures each location's data files, then registers and announces
    them, with the mark-set-done if given, in one transaction; all or none."""

    partitions: list[RegisterPartitionItem] = Field(min_length=1, max_length=MAX_NEW_PARTITIONS)
    mark_set_done: SpecValues | None = Field(
        None,
        min_length=1,
        description="A (partial) spec to announce as complete in the same transaction.",
    )
    announce: Announce | None = Field(None, description="Default: the table's announce mode.")
    job_id: str | None = Field(None, max_length=128)


class Registered(_Model):
    """What a registration wrote: the partitions, their ADD_PARTITION events, the done."""

    table: str
    partitions: list[Partition]
    event_ids: list[int] = Field(description="The ADD_PARTITION events, each once.")
    done_event_id: int | None = Field(description="The MARK_SET_DONE, if one was asked for.")

    @classmethod
    def of_registration(cls, table: str, registration: Registration) -> Registered:
        return cls(
            table=table,
            partitions=[Partition.of_partition(p) for p in registration.partitions],
            event_ids=list(registration.event_ids),
            done_event_id=registration.done_event_id,
        )

    def to_registration(self) -> Registration:
        from hcat_notify.store.table_changes import Registration

        return Registration(_partitions_of(self.table, self.partitions), self.done_event_id)


class _Purged(_Model):
    purged: bool = Field(description="Files were to be deleted (purge=true).")
    deleted: list[str] = Field(description="Locations whose files the purge deleted.")
    kept: list[str] = Field(
        description="Locations the purge did not delete on purpose, each with why: outside "
        "the warehouse roots, or still used by a registered table or partition."
    )
    errors: list[str] = Field(
        description="What the purge could not delete. The drop itself stands: the files "
        "are left for nobody to read."
    )

    def to_purge(self) -> Purge:
        from hcat_notify.lifecycle import Purge

        return Purge(deleted=list(self.deleted), errors=list(self.errors), kept=list(self.kept))


class PartitionsDropped(_Purged):
    """Dropped partitions and their DROP_PARTITION events."""

    table: str
    partitions: list[Partition]
    event_ids: list[int]

    @classmethod
    def of_drop(
        cls,
        table: str,
        partitions: Sequence[PartitionInfo],
        event_ids: Sequence[int],
        purge: Purge | None,
        **extra: Any,
    ) -> Self:
        """``purge`` None: files were kept; ``extra``: the fields of a subclass."""
        return cls(
            **extra,
            table=table,
            partitions=[Partition.of_partition(p) for p in partitions],
            event_ids=list(event_ids),
            purged=purge is not None,
            deleted=[] if purge is None else list(purge.deleted),
            kept=[] if purge is None else list(purge.kept),
            errors=[] if purge is None else list(purge.errors),
        )

    def to_dropped(self) -> DroppedPartitions:
        from hcat_notify.store.table_changes import DroppedPartitions

        return DroppedPartitions(_partitions_of(self.table, self.partitions), tuple(self.event_ids))


class TableDropped(PartitionsDropped):
    """A dropped table (its definition as it was), the partitions that went with it, and
    its DROP_TABLE events (prefix topic and the table's own)."""

    definition: Table

    def to_dropped_table(self) -> DroppedTable:
        from hcat_notify.store.table_changes import DroppedTable

        return DroppedTable(
            self.definition.to_table(),
            _partitions_of(self.table, self.partitions),
            tuple(self.event_ids),
        )


class Discover(_Request):
    """Hive's MSCK REPAIR TABLE: register the ``k=v/...`` directories of the table's
    location that hold data files and are not registered."""

    dry_run: bool = Field(False, description="Report what would be registered; change nothing.")
    skip_foreign: bool = Field(
        False,
        description="Register what was found even when directories that are not partitions "
        "of the table are there (reported); without it they refuse the whole run.",
    )
    announce: Announce | None = Field(None, description="Default: the table's announce mode.")


class DiscoveredPartition(_Model):
    spec: str = Field(description="Path form k1=v1/k2=v2 (escaped as Hive escapes).")
    values: SpecValues
    location: str
    file_count: int
    total_bytes: int


class ForeignPath(_Model):
    path: str = Field(description="Relative to the table's location.")
    reason: str


class Discovery(_Model):
    """What a discovery found, and (unless a dry run) registered and announced."""

    table: str
    dry_run: bool
    found: list[DiscoveredPartition] = Field(description="On disk and not registered.")
    partitions: list[Partition] = Field(description="Registered now (none for a dry run).")
    event_ids: list[int]
    foreign: list[ForeignPath] = Field(description="Not partition directories of the table.")
    empty: list[str] = Field(description="Partition directories without data files.")

    @classmethod
    def of_discovery(cls, found: Discovered) -> Discovery:
        registration = found.registration
        return cls(
            table=found.table,
            dry_run=found.dry_run,
            found=[
                DiscoveredPartition(
                    spec=item.spec.to_path(),
                    values=item.spec.as_dict(),
                    location=item.location,
                    file_count=item.file_count,
                    total_bytes=item.total_bytes,
                )
                for item in found.found
                if isinstance(item.spec, PartitionSpec)
            ],
            partitions=[]
            if registration is None
            else [Partition.of_partition(p) for p in registration.partitions],
            event_ids=[] if registration is None else list(registration.event_ids),
            foreign=[ForeignPath(path=path, reason=reason) for path, reason in found.foreign],
            empty=list(found.empty),
        )

    def to_discovery(self) -> Discovered:
        from hcat_notify.lifecycle import Discovery as Discovered
        from hcat_notify.store.table_changes import Registration

        return Discovered(
            table=self.table,
            found=tuple(
                NewPartition(
                    PartitionSpec.parse_trusted(item.spec),
                    item.location,
                    file_count=item.file_count,
                    total_bytes=item.total_bytes,
                )
                for item in self.found
            ),
            foreign=tuple((item.path, item.reason) for item in self.foreign),
            empty=tuple(self.empty),
            dry_run=self.dry_run,
            registration=Registration(_partitions_of(self.table, self.partitions))
            if self.partitions
            else None,
        )


class MarkDone(_Request):
    """A (partial) spec whose partitions are complete."""

    spec: SpecValues = Field(
        description="A non-empty prefix of the table's partition keys (in any order), "
        "with raw values: a done for datestamp covers every region of that day.",
        examples=[{"datestamp": "20110228"}],
    )


class EventRecorded(_Model):
    """The event a write recorded (what a client of the write needs of its answer)."""

    event_id: int


class DoneRecorded(EventRecorded):
    """A MARK_SET_DONE: its event and its spec."""

    table: str
    spec: str = Field(description="Canonical form: keys sorted, escaped as Hive escapes.")
    partition_spec: dict[str, str] = Field(
        description="As in the message body (null values as __HIVE_DEFAULT_PARTITION__)."
    )


class CoveringDone(DoneRecorded):
    """A retained MARK_SET_DONE that covers the spec asked about."""

    created_at: datetime
    expires_at: datetime
    generation: int = Field(default=1, description="The set generation (1: its first done).")
    reason: str | None = Field(
        default=None, description="Why it was sent: rule, changed, partial or writer."
    )

    @classmethod
    def of_done(cls, done: RetainedDone) -> CoveringDone:
        canonical = done.spec.sorted()
        return cls(
            event_id=done.event_id,
            table=str(done.table),
            spec=canonical.to_path(),
            partition_spec=canonical.as_strings(),
            created_at=done.created_at,
            expires_at=done.expires_at,
            generation=done.generation,
            reason=done.reason,
        )

    def to_done(self) -> RetainedDone:
        return RetainedDone(
            event_id=self.event_id,
            table=TableName.parse(self.table),
            spec=PartitionSpec.parse_trusted(self.spec),
            created_at=as_datetime(self.created_at),
            expires_at=as_datetime(self.expires_at),
            generation=self.generation,
            reason=self.reason,
        )


class Event(_Model):
    """One event, as the relay publishes it (headers and body of the message)."""

    event_id: int
    event: EventType = Field(description="HCAT_EVENT: the kind of change.")
    table: str
    topic: str
    spec: str
    headers: dict[str, str]
    body: dict[str, Any]
    created_at: datetime

    @classmethod
    def of_event(cls, event: OutboxEvent) -> Event:
        return cls(
            event_id=event.event_id,
            event=event.event_type,
            table=event.table,
            topic=event.topic,
            spec=event.headers.get(HEADER_SPEC, ""),
            headers=dict(event.headers),
            body=json.loads(event.body),
            created_at=event.created_at,
        )

    def to_event(self) -> OutboxEvent:
        return OutboxEvent(
            event_id=self.event_id,
            topic=self.topic,
            event_type=self.event,
            table=self.table,
            headers=dict(self.headers),
            body=json.dumps(self.body, ensure_ascii=True, separators=(",", ":")),
            created_at=as_datetime(self.created_at),
        )


class EventPage(_Model):
    events: list[Event]
    cursor: str = Field(
        description="Where these events leave you: give it as cursor= to the next call."
    )
    more: bool = Field(description="The page is full: ask again at once for the rest.")
    next: int | None = Field(
        default=None,
        description="Read without a cursor, a full page of retained dones: give it as after= "
        "to the next call, again without a cursor, which reads the rest of them (the "
        "cursor reads every event after the page's last).",
    )


class LastEvent(_Model):
    event_id: int = Field(description="The highest event id handed out so far (0: none).")
