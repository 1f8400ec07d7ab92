"""The messages of completeness rules: ``SET_LATE``, ``SET_REOPENED`` and ``SET_RULE``
(ours, on the table's topic only; docs/completeness.md). The JSON Schemas in ``schemas/``
describe their bodies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.events import HEADER_RULE_VERSION, EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import Message, dump_body, message_headers, set_body, set_headers

__all__ = ["MAX_LISTED_MISSING", "SetVerdict", "build_set_event", "build_set_rule"]

MAX_LISTED_MISSING = 1000
"""Missing parts a SET_LATE or SET_REOPENED lists at most (``missingCount`` has them all)."""


@dataclass(frozen=True)
class SetVerdict:
    """What a SET_LATE or SET_REOPENED says about a set."""

    spec: PartitionSpec
    """The set (its leading keys)."""
    generation: int
    rule_version: int
    expected: int | None
    """Parts expected (None: the rule names none, e.g. the previous set is unknown)."""
    present: int
    missing: Sequence[str]
    """Missing parts, full path forms of the partitions (``datestamp=X/region=us``)."""
    deadline: float | None = None
    """The set's deadline, seconds since the epoch (SET_LATE)."""


def build_set_event(
    event_type: EventType,
    verdict: SetVerdict,
    *,
    event_id: int,
    table: TableName,
    topic: str,
    timestamp: int,
) -> Message:
    """A ``SET_LATE`` or ``SET_REOPENED`` message.

    Raises:
        InvalidInputError: another event type.
    """
    if event_type not in (EventType.SET_LATE, EventType.SET_REOPENED):
        raise InvalidInputError(f"{event_type} is not a SET_LATE or SET_REOPENED")
    canonical = verdict.spec.sorted()
    body = set_body(event_type, event_id, table, canonical, timestamp)
    body |= {
        "generation": verdict.generation,
        "ruleVersion": verdict.rule_version,
        "expected": verdict.expected,
        "present": verdict.present,
        "missing": list(verdict.missing[:MAX_LISTED_MISSING]),
        "missingCount": len(verdict.missing),
    }
    if verdict.deadline is not None:
        body["deadline"] = int(verdict.deadline)
    headers = set_headers(
        event_type,
        event_id,
        table,
        canonical,
        generation=verdict.generation,
        rule_version=verdict.rule_version,
    )
    return Message(event_id, event_type, topic, headers, dump_body(body))


def build_set_rule(
    *,
    event_id: int,
    table: TableName,
    topic: str,
    timestamp: int,
    version: int,
    rule: Mapping[str, Any] | None,
    principal: str | None,
) -> Message:
    """A ``SET_RULE`` message: the table's rule is now ``rule`` (None: removed) at
    ``version`` (``HCAT_SPEC`` empty, ``HCAT_RULE_VERSION`` the version)."""
    body: dict[str, Any] = {
        "eventType": EventType.SET_RULE.value,
        "db": table.db,
        "table": table.table,
        "timestamp": int(timestamp),
        "eventId": event_id,
        "ruleVersion": version,
        "rule": dict(rule) if rule is not None else None,
    }
    if principal is not None:
        body["principal"] = principal
    headers = message_headers(EventType.SET_RULE, event_id, table, "")
    headers[HEADER_RULE_VERSION] = str(version)
    return Message(event_id, EventType.SET_RULE, topic, headers, dump_body(body))
