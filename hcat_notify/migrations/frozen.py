"""What the migrations need of the code as it was when each was written: copies, frozen.

A migration runs against the database of an older version and must do what it did on the
day it was written, whatever today's code says; so migrations import nothing of the live
code (a layout test checks it), only this module. Nothing here may change once a
migration uses it: a new need gets a new name.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "DEFAULT_BUCKETS",
    "DEFAULT_TOPIC_PREFIX",
    "UTCDateTime",
    "resolve_topic_0005",
    "topic_bucket_0007",
]

DEFAULT_TOPIC_PREFIX = "hcat"
"""The topic prefix of a deployment that sets none (0005)."""

DEFAULT_BUCKETS = 256
"""Buckets of topics a catalog was created with (0007)."""


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend, as the catalog's columns store them (0001):
    naive UTC on SQLite, ``timestamp with time zone`` on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_TOPIC_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def _topic_name(name: str) -> str:
    lowered = name.strip().lower() if isinstance(name, str) else ""
    if not _TOPIC_NAME.fullmatch(lowered):
        raise ValueError(f"invalid topic name {name!r}")
    return lowered


def resolve_topic_0005(
    db: str, table: str, *, prefix: str, strategy: str, properties: Mapping[str, str]
) -> str:
    """A table's topic by Hive's conventions, as 0005 resolved it: the table property
    ``hcat.msgbus.topic.name`` wins; else ``<prefix>``, ``<prefix>.<db>`` or
    ``<prefix>.<db>.<table>`` for the ``single``, ``database`` and ``table`` strategies."""
    override = properties.get("hcat.msgbus.topic.name")
    if override:
        return _topic_name(override)
    prefix = _topic_name(prefix)
    if strategy == "single":
        return prefix
    if strategy == "database":
        return f"{prefix}.{db}"
    return f"{prefix}.{db}.{table}"


def topic_bucket_0007(topic: str, bucket_count: int) -> int:
    """The bucket of a topic as 0007 assigned it: CRC-32 of its UTF-8 name, modulo the
    bucket count (the same hash every process uses for ever)."""
    return zlib.crc32(topic.encode("utf-8")) % bucket_count
