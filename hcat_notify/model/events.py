"""Kinds of notification and the JMS properties every message carries
(docs/architecture.md, "The wire contract")."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "EVENT_TYPES",
    "HEADER_DONE_REASON",
    "HEADER_EVENT",
    "HEADER_EVENT_ID",
    "HEADER_FORMAT",
    "HEADER_RULE_VERSION",
    "HEADER_SET_GENERATION",
    "HEADER_SPEC",
    "HEADER_TABLE",
    "HEADER_VERSION",
    "MESSAGE_FORMAT",
    "MESSAGE_VERSION",
    "EventType",
]

# JMS string properties: underscores only, so JMS selectors can use them.
HEADER_EVENT = "HCAT_EVENT"
HEADER_VERSION = "HCAT_MESSAGE_VERSION"
HEADER_FORMAT = "HCAT_MESSAGE_FORMAT"
HEADER_EVENT_ID = "HCAT_EVENT_ID"
HEADER_TABLE = "HCAT_TABLE"
HEADER_SPEC = "HCAT_SPEC"
# Completeness (docs/completeness.md): on MARK_SET_DONE, SET_LATE and SET_REOPENED.
HEADER_SET_GENERATION = "HCAT_SET_GENERATION"  # decimal, 1 for a set's first done
HEADER_DONE_REASON = "HCAT_DONE_REASON"  # rule, changed, partial, writer
HEADER_RULE_VERSION = "HCAT_RULE_VERSION"  # the rule that decided (absent: none did)

MESSAGE_VERSION = "0.1"  # Hive's HCatalog message version
MESSAGE_FORMAT = "json"


class EventType(StrEnum):
    """Kinds of notification (``HCAT_EVENT``), spelled as Hive's HCatalog listener does."""

    ADD_PARTITION = "ADD_PARTITION"
    MARK_SET_DONE = "MARK_SET_DONE"
    DROP_PARTITION = "DROP_PARTITION"
    INSERT = "INSERT"  # an append to, or an overwrite of, an existing partition
    CREATE_TABLE = "CREATE_TABLE"
    DROP_TABLE = "DROP_TABLE"
    # Ours, on the table's topic only (docs/completeness.md):
    SET_LATE = "SET_LATE"  # a set passed its deadline incomplete; lists what is missing
    SET_REOPENED = "SET_REOPENED"  # a drop left a done set incomplete
    SET_RULE = "SET_RULE"  # the table's completeness rule was set or removed

    @property
    def about_table(self) -> bool:
        """Whether the event concerns a whole table (no partition spec: ``HCAT_SPEC`` is
        empty): CREATE_TABLE, DROP_TABLE, SET_RULE."""
        return self in (EventType.CREATE_TABLE, EventType.DROP_TABLE, EventType.SET_RULE)

    @property
    def about_set(self) -> bool:
        """Whether the event is a verdict on a set (``HCAT_SPEC`` is the set, keys sorted):
        MARK_SET_DONE, SET_LATE, SET_REOPENED."""
        return self in (EventType.MARK_SET_DONE, EventType.SET_LATE, EventType.SET_REOPENED)


EVENT_TYPES: Mapping[str, EventType] = MappingProxyType({kind.value: kind for kind in EventType})
"""``EventType(value)`` as a dict lookup, for rows read by the 100,000 (the Enum call
costs microseconds per row)."""
