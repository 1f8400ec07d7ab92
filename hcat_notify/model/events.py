"""Kinds of notification and the JMS properties every message carries (DESIGN.md,
"Wire contract")."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "HEADER_EVENT",
    "HEADER_EVENT_ID",
    "HEADER_FORMAT",
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

MESSAGE_VERSION = "0.1"  # Hive's HCatalog message version
MESSAGE_FORMAT = "json"


class EventType(StrEnum):
    """Kinds of notification (``HCAT_EVENT``), spelled as Hive's HCatalog listener does."""

    ADD_PARTITION = "ADD_PARTITION"
    MARK_SET_DONE = "MARK_SET_DONE"
