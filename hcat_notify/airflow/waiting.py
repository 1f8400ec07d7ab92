"""The waits behind the Airflow sensors and triggers, as plain blocking Python.

Nothing here imports Airflow: the sensors call these functions in the worker, the
triggers in a thread of the triggerer's event loop.

A wait subscribes first (:class:`~hcat_notify.consumer.NotificationConsumer` waits for
the SUBSCRIBE receipts), then asks the catalog — or the HTTP API when the settings name
one — whether the condition already holds, then watches live notifications. A done
committed between a sensor's first check and its trigger's subscription is therefore
seen by the check or arrives live (invariant 5). An unreachable broker, database or API
is retried with back-off until the deadline: an outage while deferred is ridden out.
Bad input (unknown table, a key that is not a partition key) and refused credentials are
raised at once: waiting cannot fix them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hcat_notify.broker.backoff import Backoff
from hcat_notify.config import Settings
from hcat_notify.consumer import (
    CatalogReader,
    Condition,
    Notification,
    NotificationConsumer,
    Target,
    open_reader,
    sets_of,
)
from hcat_notify.errors import (
    ApiUnavailableError,
    BrokerAuthError,
    BrokerError,
    StoreUnavailableError,
    SubscriberInUseError,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.set_records import SetReport

__all__ = [
    "TRANSIENT_ERRORS",
    "Condition",
    "Reader",
    "Target",
    "Waiter",
    "check",
    "missing_lines",
    "notification_payload",
    "open_reader",
    "resolve_target",
]

logger = logging.getLogger(__name__)

# Errors an outage causes; a wait retries them until its deadline. BrokerAuthError is a
# BrokerError but is raised: retrying does not fix a refused principal.
# A durable subscriber's name still held by a process that died is retried too: its
# claim lapses after the subscriber timeout.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    BrokerError,
    StoreUnavailableError,
    ApiUnavailableError,
    SubscriberInUseError,
)
# How long one receive slice lasts: bounds how late a cancel or the deadline is noticed.
RECEIVE_SLICE = 1.0

Reader = CatalogReader
"""What a wait reads: :class:`~hcat_notify.store.Catalog` or the HTTP API's client, as
:func:`~hcat_notify.consumer.open_reader` opens it."""


def resolve_target(
    reader: Reader,
    condition: Condition,
    table: str,
    spec: Mapping[str, Any],
    min_generation: int | None = None,
) -> Target:
    """Validate ``table`` and ``spec`` against the catalog (``min_generation``: a done
    counts only at that set generation or a later one).

    Raises:
        TableNotFoundError: no such table.
        UnknownPartitionKeyError: the spec names a key the table does not have.
        InvalidInputError: a malformed name or value.
    """
    name = TableName.parse(table)
    info = reader.get_table(name)
    values = {str(key): None if value is None else str(value) for key, value in spec.items()}
    return Target(condition, name, info.spec(values, partial=True), min_generation=min_generation)


def _found(
    target: Target, event: EventType, event_id: int | None, spec: PartitionSpec, **extra: Any
) -> dict[str, Any]:
    """The payload of a condition found in the catalog (a retained done, a partition)."""
    return {
        "table": str(target.table),
        "event": event.value,
        "event_id": event_id,
        "spec": spec.to_path(),
        "partition_spec": spec.as_dict(),
        "wanted": target.spec.to_path(),
        **extra,
    }


def notification_payload(
    notification: Notification, spec: PartitionSpec | None = None
) -> dict[str, Any]:
    """The JSON-ready facts of a notification a sensor or an asset event carries.

    Args:
        notification: the notification.
        spec: the spec to report (default: the notification's own ``HCAT_SPEC``, None
            for table events and batches without a common spec).
    """
    body = notification.body
    spec = spec if spec is not None else notification.spec
    payload: dict[str, Any] = {
        "table": str(notification.table),
        "event": notification.event_type.value,
        "event_id": notification.event_id,
        "spec": spec.to_path() if spec is not None else None,
        "partition_spec": spec.as_dict() if spec is not None else None,
        "topic": notification.topic,
        "source": notification.source.value,
    }
    if len(notification.partitions) > 1:
        payload["partitions"] = [partition.to_path() for partition in notification.partitions]
    location = body.get("location")
    if isinstance(location, str):
        payload["location"] = location
    timestamp = body.get("timestamp")
    if isinstance(timestamp, int | float):
        payload["timestamp"] = timestamp
    if notification.generation is not None:  # a verdict on a set (docs/completeness.md)
        payload["generation"] = notification.generation
        if notification.reason is not None:
            payload["reason"] = notification.reason
        if notification.event_type is not EventType.MARK_SET_DONE:
            payload["missing"] = list(notification.missing)
            payload["missing_count"] = body.get("missingCount", len(notification.missing))
    elif notification.event_type is EventType.SET_RULE:
        payload["rule_version"] = body.get("ruleVersion")
        payload["rule"] = body.get("rule")
    return payload


def check(reader: Reader, target: Target) -> dict[str, Any] | None:
    """The condition's payload if it holds in the catalog now, else None."""
    if target.condition is Condition.DONE:
        done = reader.find_covering_done(
            target.table, target.spec, min_generation=target.min_generation
        )
        if done is None:
            return None
        return _found(
            target,
            EventType.MARK_SET_DONE,
            done.event_id,
            done.spec,
            source="retained",
            generation=done.generation,
            reason=done.reason,
        )
    partitions = reader.list_partitions(target.table, target.spec)
    if not partitions:
        return None
    first = partitions[0]
    return _found(
        target,
        EventType.ADD_PARTITION,
        first.event_id,
        first.spec,
        location=first.location,
        source="registry",
    )


MAX_MISSING_LOGGED = 50
MAX_SETS_LOGGED = 10


def missing_lines(reader: Reader, table: str, spec: Mapping[str, Any]) -> list[str]:
    """What a timed-out wait for a done logs when the table has a completeness rule:
    per set the spec names (or covers, at most 10), its state and the parts still
    missing (at most 50 each); nothing for a table without a rule."""
    name = TableName.parse(table)
    info = reader.get_table(name)
    sets = sets_of(reader)
    if info.rule_version is None or sets is None:
        return []
    record = sets.rule(name)
    if record is None or record.rule is None:
        return []
    values = {str(key): None if value is None else str(value) for key, value in spec.items()}
    wanted = info.spec(values, partial=True)
    given = wanted.as_dict()
    keys = record.rule.set_keys
    if all(key in given for key in keys):
        reports = [sets.state(name, {key: given[key] for key in keys})]
    else:
        reports = sets.list(name, wanted, limit=MAX_SETS_LOGGED)
    return [_missing_line(report) for report in reports]


def _missing_line(report: SetReport) -> str:
    state = "no part yet" if report.state is None else report.state.value
    expected = "?" if report.expected is None else str(report.expected)
    line = (
        f"{report.table} {report.spec.to_path()}: {state}, generation {report.generation}, "
        f"{len(report.present)} of {expected} parts present"
    )
    if report.done_generation is not None:
        line += f", done at generation {report.done_generation} ({report.done_reason})"
    if report.late_by is not None:
        line += f", late by {report.late_by:.0f} s"
    if report.missing:
        shown = ", ".join(report.missing[:MAX_MISSING_LOGGED])
        more = len(report.missing) - MAX_MISSING_LOGGED
        line += f"; missing {len(report.missing)}: {shown}"
        if more > 0:
            line += f" (+{more} more)"
    return line


class Waiter:
    """Subscribe, check, then watch live notifications until the condition holds.

    Args:
        settings: where the catalog (or API) and the broker are, and who we are.
        condition, table, spec: what to wait for (validated on the first attempt).
        deadline: wall-clock time (``time.time()``) at which :meth:`wait` gives up;
            wall-clock because it crosses processes (worker → triggerer).
        subscriber: a durable subscriber name for the consumer (None: none).
        min_generation: a done counts only at this set generation or a later one.
        consumer_factory: builds the consumer (tests may pass a double).
    """

    def __init__(
        self,
        settings: Settings,
        condition: Condition,
        table: str,
        spec: Mapping[str, Any],
        *,
        deadline: float,
        subscriber: str | None = None,
        min_generation: int | None = None,
        consumer_factory: Callable[..., NotificationConsumer] = NotificationConsumer,
    ) -> None:
        self._settings = settings
        self._min_generation = min_generation
        self._condition = condition
        self._table = table
        self._spec = dict(spec)
        self._deadline = deadline
        self._subscriber = subscriber
        self._factory = consumer_factory
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._consumer: NotificationConsumer | None = None

    def cancel(self) -> None:
        """Make :meth:`wait` return None within about a second (from any thread)."""
        self._cancelled.set()
        with self._lock:
            if self._consumer is not None:
                self._consumer.stop()

    def wait(self) -> dict[str, Any] | None:
        """The payload once the condition holds; None at the deadline or when cancelled.

        Raises:
            InvalidInputError, TableNotFoundError: bad input (at once).
            TableDroppedError: the table was dropped while waiting.
            BrokerAuthError: the broker refused the consumer principal.
        """
        backoff = Backoff(maximum=5.0)
        while not self._cancelled.is_set() and time.time() < self._deadline:
            try:
                return self._attempt()
            except BrokerAuthError:
                raise
            except TRANSIENT_ERRORS as exc:
                delay = min(backoff.next_delay(), max(0.0, self._deadline - time.time()))
                logger.warning(
                    "hcat wait for %s %s: %s; retrying in %.1fs",
                    self._table,
                    self._spec,
                    exc,
                    delay,
                )
                self._cancelled.wait(delay)
        return None

    def _attempt(self) -> dict[str, Any] | None:
        reader = open_reader(self._settings, durable=self._subscriber is not None)
        try:
            target = resolve_target(
                reader, self._condition, self._table, self._spec, self._min_generation
            )
            consumer = self._factory(
                [str(target.table)],
                settings=self._settings,
                subscriber=self._subscriber,
                catalog=reader,
            )
            with self._lock:
                if self._cancelled.is_set():
                    consumer.close()
                    return None
                self._consumer = consumer
            try:
                consumer.start()  # subscribed (receipts) before the check below
                logger.info(
                    "hcat wait subscribed table=%s spec=%s condition=%s",
                    target.table,
                    target.spec.to_path(),
                    target.condition.value,
                )
                found = check(reader, target)
                if found is not None:
                    return found
                return self._watch(consumer, target)
            finally:
                with self._lock:
                    self._consumer = None
                consumer.close()
        finally:
            reader.close()

    def _watch(self, consumer: NotificationConsumer, target: Target) -> dict[str, Any] | None:
        while not self._cancelled.is_set():
            remaining = self._deadline - time.time()
            if remaining <= 0:
                return None
            # A slice ends after RECEIVE_SLICE seconds without a notification.
            for notification in consumer.notifications(timeout=min(remaining, RECEIVE_SLICE)):
                matched = target.match(notification)
                if matched is not None:
                    payload = notification_payload(notification, matched)
                    return {**payload, "wanted": target.spec.to_path()}
                if time.time() >= self._deadline:
                    return None
        return None
