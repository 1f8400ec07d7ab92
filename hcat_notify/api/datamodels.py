"""What the HTTP API sends and takes: pydantic models, apart from the routes.

JSON names are camelCase (``eventId``, ``partitionKeys``), as in Hive's messages; times
are ISO 8601 in UTC. Request bodies refuse unknown fields, so a misspelt field is an
error instead of a silent default. Each response model has a ``of_*`` constructor from
the catalog's record, so the routes never build JSON by hand.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hcat_notify.model.events import HEADER_SPEC
from hcat_notify.model.topics import destination_for
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    MAX_RETENTION,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
)

__all__ = [
    "MAX_NEW_PARTITIONS",
    "CoveringDone",
    "CreateTable",
    "DoneRecorded",
    "Event",
    "EventPage",
    "Health",
    "LastEvent",
    "MarkDone",
    "NewPartitionItem",
    "NewPartitions",
    "Partition",
    "PartitionList",
    "PartitionPage",
    "Problem",
    "Readiness",
    "Table",
    "TableList",
]

MAX_NEW_PARTITIONS = 1000
"""Partitions one request may register (Hive's default ``max_partitions`` of a write)."""

SpecValues = dict[str, str | None]


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
    instance: str | None = Field(None, description="The request path.")
    error: str | None = Field(
        None, description="The hcat_notify exception class (clients raise the same type)."
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
        )


class TableList(_Model):
    tables: list[Table]


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

    @property
    def retention(self) -> timedelta:
        return timedelta(seconds=self.retention_seconds)


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
        )


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
    """Partitions to register and announce (one ADD_PARTITION each), all or none."""

    partitions: list[NewPartitionItem] = Field(min_length=1, max_length=MAX_NEW_PARTITIONS)
    job_id: str | None = Field(None, max_length=128)


class MarkDone(_Request):
    """A (partial) spec whose partitions are complete."""

    spec: SpecValues = Field(
        description="Any non-empty subset of the table's partition keys with raw values.",
        examples=[{"datestamp": "20110228"}],
    )


class DoneRecorded(_Model):
    """A MARK_SET_DONE: its event and its spec."""

    event_id: int
    table: str
    spec: str = Field(description="Canonical form: keys sorted, escaped as Hive escapes.")
    partition_spec: dict[str, str] = Field(
        description="As in the message body (null values as __HIVE_DEFAULT_PARTITION__)."
    )


class CoveringDone(DoneRecorded):
    """A retained MARK_SET_DONE that covers the spec asked about."""

    created_at: datetime
    expires_at: datetime

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
        )


class Event(_Model):
    """One event, as the relay publishes it (headers and body of the message)."""

    event_id: int
    event: str = Field(description="HCAT_EVENT: ADD_PARTITION, MARK_SET_DONE, ...")
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
            event=event.event_type.value,
            table=event.table,
            topic=event.topic,
            spec=event.headers.get(HEADER_SPEC, ""),
            headers=dict(event.headers),
            body=json.loads(event.body),
            created_at=event.created_at,
        )


class EventPage(_Model):
    events: list[Event]
    cursor: str = Field(
        description="Where these events leave you: give it as cursor= to the next call."
    )
    more: bool = Field(description="The page is full: ask again at once for the rest.")


class LastEvent(_Model):
    event_id: int = Field(description="The highest event id handed out so far (0: none).")
