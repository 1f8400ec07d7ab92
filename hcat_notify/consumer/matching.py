"""Whether a notification satisfies what a wait waits for: one rule for
:meth:`~hcat_notify.consumer.NotificationConsumer.wait_for_set_done` and the Airflow
sensors and triggers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hcat_notify.errors import TableDroppedError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.notification import Notification

__all__ = ["Condition", "Target", "matches"]


class Condition(StrEnum):
    """What a wait waits for."""

    DONE = "done"  # a MARK_SET_DONE covering the spec
    PARTITION = "partition"  # a registered partition under the spec


@dataclass(frozen=True)
class Target:
    """A validated condition: the table and the (partial) spec in the table's key order."""

    condition: Condition
    table: TableName
    spec: PartitionSpec
    min_generation: int | None = None
    """A done counts only at this set generation or a later one (None: any done)."""

    def match(self, notification: Notification) -> PartitionSpec | None:
        """:func:`matches` for this target."""
        return matches(self, notification)


def matches(target: Target, notification: Notification) -> PartitionSpec | None:
    """The spec by which a live or retained notification satisfies ``target`` (the
    covering done, or the first partition under the spec; a batched announcement lists
    several), else None.

    Raises:
        TableDroppedError: the notification is the table's DROP_TABLE: nothing will
            satisfy the condition any more.
    """
    if notification.table != target.table:
        return None
    if notification.event_type is EventType.DROP_TABLE:
        raise TableDroppedError(
            f"table {target.table} was dropped (event {notification.event_id}) while "
            f"waiting for {target.spec.canonical()}",
            event_id=notification.event_id,
            topic=notification.topic,
        )
    if target.condition is Condition.DONE:
        done = notification.event_type is EventType.MARK_SET_DONE
        spec = notification.spec
        if not done or spec is None or not spec.covers(target.spec):
            return None  # a SET_LATE or SET_REOPENED never ends a wait for a done
        minimum = target.min_generation
        return spec if minimum is None or (notification.generation or 1) >= minimum else None
    if notification.event_type is not EventType.ADD_PARTITION:
        return None
    partitions = notification.partitions or (
        (notification.spec,) if notification.spec is not None else ()
    )
    return next((p for p in partitions if target.spec.covers(p)), None)
