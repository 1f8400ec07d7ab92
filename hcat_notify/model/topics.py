"""Which topic a table's messages go to (Hive's naming conventions).

* ``table`` strategy (default): ``<prefix>.<db>.<table>``;
* ``database``: ``<prefix>.<db>``;
* ``single``: ``<prefix>``;
* a table property ``hcat.msgbus.topic.name`` overrides the name for that table.

Names are lower-cased; the STOMP destination is ``/topic/<name>``.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Mapping
from enum import StrEnum

from hcat_notify.errors import InvalidIdentifierError
from hcat_notify.model.names import TableName

__all__ = [
    "DEFAULT_BUCKETS",
    "DEFAULT_TOPIC_PREFIX",
    "MAX_BUCKETS",
    "TOPIC_NAME_PROPERTY",
    "TopicStrategy",
    "destination_for",
    "resolve_topic",
    "topic_bucket",
    "validate_topic_name",
]

TOPIC_NAME_PROPERTY = "hcat.msgbus.topic.name"
DEFAULT_TOPIC_PREFIX = "hcat"


class TopicStrategy(StrEnum):
    """How tables map to topics (Hive's conventions)."""

    TABLE = "table"  # <prefix>.<db>.<table>
    DATABASE = "database"  # <prefix>.<db>
    SINGLE = "single"  # <prefix>


# Dot-separated segments of letters, digits, '_' and '-': no ActiveMQ wildcards
# ('*', '>'), no '/', which STOMP destinations use as the type prefix, no spaces.
_TOPIC_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def validate_topic_name(name: str) -> str:
    """Return ``name`` lower-cased if it is usable as an ActiveMQ topic name.

    Raises:
        InvalidIdentifierError: empty, or has characters other than letters, digits,
            ``_``, ``-`` and single dots between segments.
    """
    lowered = name.strip().lower() if isinstance(name, str) else ""
    if not _TOPIC_NAME.fullmatch(lowered):
        raise InvalidIdentifierError(
            f"invalid topic name {name!r}: use dot-separated segments of letters, digits, "
            "'_' and '-' (no wildcards, slashes or spaces)"
        )
    return lowered


def resolve_topic(
    table: TableName,
    *,
    prefix: str,
    strategy: TopicStrategy,
    properties: Mapping[str, str] | None = None,
) -> str:
    """Return the topic name for ``table``.

    Args:
        table: the table whose messages are published.
        prefix: the deployment's topic prefix (``hcat`` by default).
        strategy: per table, per database or a single topic.
        properties: the table's properties; ``hcat.msgbus.topic.name`` wins if present.

    Raises:
        InvalidIdentifierError: the prefix or the override is not a valid topic name.
    """
    override = (properties or {}).get(TOPIC_NAME_PROPERTY)
    if override:
        return validate_topic_name(override)
    prefix = validate_topic_name(prefix)
    if strategy is TopicStrategy.SINGLE:
        return prefix
    if strategy is TopicStrategy.DATABASE:
        return f"{prefix}.{table.db}"
    return f"{prefix}.{table.db}.{table.table}"


DEFAULT_BUCKETS = 256
"""Buckets of topics a catalog is created with (Pulsar's namespace bundles)."""

MAX_BUCKETS = 65_536


def topic_bucket(topic: str, bucket_count: int) -> int:
    """The bucket of ``topic``: a stable hash (CRC-32), the same in every process."""
    return zlib.crc32(topic.encode("utf-8")) % bucket_count


@functools.lru_cache(maxsize=16_384)
def destination_for(topic: str) -> str:
    """Return the STOMP destination of a topic name: ``/topic/<name>``.

    Cached: the relay asks for each of its events, and a deployment has a bounded set
    of topics. An invalid name raises every time (errors are not cached).
    """
    return f"/topic/{validate_topic_name(topic)}"
