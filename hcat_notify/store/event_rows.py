"""The rows that record an event: one builder, whichever path writes them.

The outbox row of any message, and the two rows of a MARK_SET_DONE (its retention row
and its outbox row). The session path (:mod:`hcat_notify.store.retention`, the journal,
registration) and the single-round-trip path (:mod:`hcat_notify.store.fast_path`) both
insert what these functions build, so the two cannot disagree on a column.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.trace import TRACEPARENT, current_traceparent
from hcat_notify.model.wire import Message, build_mark_set_done

__all__ = ["OUTBOX_COLUMNS", "RETENTION_COLUMNS", "DoneRows", "done_rows", "outbox_row"]

OUTBOX_COLUMNS = (
    "event_id",
    "topic",
    "bucket",
    "event_type",
    "table_name",
    "headers",
    "body",
    "created_at",
    "attempts",
)
"""The outbox columns an event is written with (the rest are the relay's to set)."""

RETENTION_COLUMNS = (
    "event_id",
    "table_id",
    "spec",
    "spec_json",
    "created_at",
    "expires_at",
    "generation",
    "reason",
)
"""The columns of a retention row."""


def outbox_row(message: Message, table: TableName, bucket: int, now: datetime) -> dict[str, Any]:
    """The outbox row of a built message, in ``bucket`` (its topic's), created ``now``;
    its headers with the writer's ``traceparent`` when it has one."""
    headers = dict(message.headers)
    traceparent = current_traceparent()
    if traceparent is not None:
        headers.setdefault(TRACEPARENT, traceparent)
    return {
        "event_id": message.event_id,
        "topic": message.topic,
        "bucket": bucket,
        "event_type": message.event_type.value,
        "table_name": str(table),
        "headers": headers,
        "body": message.body,
        "created_at": now,
        "attempts": 0,
    }


@dataclass(frozen=True)
class DoneRows:
    """A MARK_SET_DONE as rows: its retention row and its outbox row."""

    event_id: int
    spec: PartitionSpec
    """The done's spec as recorded (keys in the table's order, the caller's canonical)."""
    retention: dict[str, Any]
    outbox: dict[str, Any]


def done_rows(
    *,
    event_id: int,
    table_id: int,
    table: TableName,
    topic: str,
    bucket: int,
    spec: PartitionSpec,
    retention: timedelta,
    now: datetime,
    generation: int = 1,
    reason: str = "writer",
    rule_version: int | None = None,
) -> DoneRows:
    """The rows of the MARK_SET_DONE of ``spec`` (a done spec of the table, checked by
    the caller) as event ``event_id``, retained for ``retention`` from ``now``: of the
    set's ``generation``, sent for ``reason`` (by the rule of ``rule_version``)."""
    message = build_mark_set_done(
        event_id=event_id,
        table=table,
        topic=topic,
        spec=spec,
        timestamp=int(now.timestamp()),
        generation=generation,
        reason=reason,
        rule_version=rule_version,
    )
    return DoneRows(
        event_id=event_id,
        spec=spec,
        retention={
            "event_id": event_id,
            "table_id": table_id,
            "spec": spec.to_path(),
            "spec_json": spec.as_dict(),
            "created_at": now,
            "expires_at": now + retention,
            "generation": generation,
            "reason": reason,
        },
        outbox=outbox_row(message, table, bucket, now),
    )
