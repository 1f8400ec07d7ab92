"""What the migrations need of the code as it was when each was written: copies, frozen.

A migration runs against the database of an older version and must do what it did on the
day it was written, whatever today's code says; so migrations import nothing of the live
code (a layout test checks it), only this module. Nothing here may change once a
migration uses it: a new need gets a new name.
"""

from __future__ import annotations

import os
import posixpath
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
    "canonical_location_0023",
    "location_key_0023",
    "outside_key_0023",
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


# -- 0023: a stored location's canonical spelling and key (hcat_notify.warehouse) --------

_LOCAL_0023 = ("file", "local")
_BUCKETS_0023 = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


def _split_0023(location: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` as Hadoop's ``Path`` splits a location."""
    colon, slash = location.find(":"), location.find("/")
    if colon <= 1 or (slash != -1 and slash < colon):
        return "", "", location
    scheme, rest = location[:colon], location[colon + 1 :]
    if rest.startswith("//"):
        end = rest.find("/", 2)
        return (scheme, rest[2:], "/") if end == -1 else (scheme, rest[2:end], rest[end:])
    return scheme, "", rest


def _another_host_0023(scheme: str, authority: str) -> bool:
    return scheme.lower() in _LOCAL_0023 and authority.lower() not in ("", "localhost")


def canonical_location_0023(location: str) -> str:
    """The spelling the current code stores, or ``location`` where it has none."""
    scheme, authority, path = _split_0023(location)
    if not scheme:
        # "~/x" was accepted as the writer's home: taken as the upgrading user's
        expanded = os.path.expanduser(location) if location.startswith("~") else location
        return os.path.realpath(expanded) if expanded.startswith("/") else location
    if scheme.lower() in _LOCAL_0023:
        if _another_host_0023(scheme, authority) or not path.startswith("/"):
            return location
        return "file://" + os.path.realpath(posixpath.normpath(path))
    if scheme == "har" and authority.lower() in ("file-", "file-localhost"):
        archive = _split_0023(_archive_0023(location))[2]
        real = os.path.realpath(posixpath.normpath(archive))
        return f"har://{authority}{real}{path[len(archive) :]}".rstrip("/")
    return location.rstrip("/") or location


def _archive_0023(location: str) -> str:
    """A Hadoop Archive's directory on its filesystem (``har://file-/w/x.har/in``)."""
    scheme, authority, path = _split_0023(location)
    if scheme != "har":
        return location
    under, _, host = authority.partition("-")
    segments = path.split("/")
    archive = next((i for i, s in enumerate(segments) if s.endswith(".har")), len(segments) - 1)
    path = "/".join(segments[: archive + 1])
    return f"file://{path}" if under == "file" else f"{under}://{host}{path}"


def location_key_0023(location: str) -> str:
    """The key of a stored location (symlinks not resolved again)."""
    scheme, authority, path = _split_0023(_archive_0023(location))
    lowered = scheme.lower()
    if lowered in ("", *_LOCAL_0023):
        if not path.startswith("/") or (
            _another_host_0023(scheme, authority) and not path.strip("/")
        ):
            return ""
        return "file://" + posixpath.normpath(path)
    if lowered in _BUCKETS_0023:
        return f"{_BUCKETS_0023[lowered]}://" + posixpath.normpath(
            f"/{authority}/{path.lstrip('/')}"
        )
    user, _, host = authority.rpartition("@")
    host = host.partition(":")[0].lower()
    if user and lowered in ("abfs", "abfss", "wasb", "wasbs"):  # the container
        host = f"{user.lower()}@{host}"
    return f"{lowered}://{host}" + posixpath.normpath("/" + path.lstrip("/"))


def outside_key_0023(key: str, table_key: str) -> str | None:
    """``key`` when it lies outside the table's (``table_key``), else None."""
    if not key:
        return None
    if table_key and (key == table_key or key.startswith(table_key.rstrip("/") + "/")):
        return None
    return key
