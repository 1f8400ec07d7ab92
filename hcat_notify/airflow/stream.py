"""A durable subscriber's notifications, one at a time, for an asset watcher's trigger.

Plain blocking Python (no Airflow import): :class:`~hcat_notify.airflow.triggers.
HcatEventTrigger` calls :meth:`EventStream.next` in a thread of its own. The consumer is a
durable subscriber: its watermarks live in the catalog and move once the triggerer takes
a notification (asks for the next one) and when the stream is closed. A triggerer
stopped and started again neither repeats nor loses a notification. One killed outright
(``kill -9``) within about a second of taking a notification may lose it: Airflow stores
the asset event after the trigger handed it over (Airflow 3.3's acknowledged shared
streams would close that window; not used yet).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hcat_notify.airflow.waiting import (
    TRANSIENT_ERRORS,
    Reader,
    notification_payload,
    open_reader,
)
from hcat_notify.broker.backoff import Backoff
from hcat_notify.config import Settings
from hcat_notify.consumer import Notification, NotificationConsumer
from hcat_notify.errors import BrokerAuthError, InvalidInputError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName

__all__ = ["EventStream", "parse_event_types"]

logger = logging.getLogger(__name__)


def parse_event_types(names: Sequence[str]) -> frozenset[EventType]:
    """``["MARK_SET_DONE", ...]`` as event types.

    Raises:
        InvalidInputError: an empty list or an unknown name.
    """
    if not names:
        raise InvalidInputError("give at least one event type")
    try:
        return frozenset(EventType(name.upper()) for name in names)
    except ValueError as exc:
        known = ", ".join(kind.value for kind in EventType)
        raise InvalidInputError(f"unknown event type in {list(names)}: known are {known}") from exc


class EventStream:
    """Notifications of ``tables`` whose type is one of ``event_types``, in event-id order
    per topic, for the durable subscriber ``subscriber``.

    Args:
        settings: the catalog database (durable subscribers need it) and the broker.
        tables: ``db.table`` names.
        event_types: the event types to hand out; others are passed over (and counted
            as handled).
        subscriber: the durable subscriber name.
        consumer_factory: builds the consumer (tests may pass a double).
    """

    def __init__(
        self,
        settings: Settings,
        tables: Sequence[str],
        event_types: Sequence[str],
        subscriber: str,
        *,
        consumer_factory: Callable[..., NotificationConsumer] = NotificationConsumer,
    ) -> None:
        self._settings = settings
        self._tables = [str(TableName.parse(table)) for table in tables]
        self._types = parse_event_types(event_types)
        self._subscriber = subscriber
        self._factory = consumer_factory
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # held by next() and close(): one at a time
        self._consumer: NotificationConsumer | None = None
        self._reader: Reader | None = None
        self._iterator: Iterator[Notification] | None = None
        self._locations: dict[str, str] = {}

    def next(self) -> dict[str, Any] | None:
        """The next matching notification's payload; None once stopped.

        Raises:
            InvalidInputError, TableNotFoundError: bad tables or subscriber name.
            BrokerAuthError: the broker refused the consumer principal.
        """
        with self._lock:
            backoff = Backoff(maximum=5.0)
            while not self._stopped.is_set():
                try:
                    notification = next(self._open(), None)
                except BrokerAuthError:
                    raise
                except TRANSIENT_ERRORS as exc:
                    self._discard()
                    delay = backoff.next_delay()
                    logger.warning(
                        "hcat event stream subscriber=%s: %s; retrying in %.1fs",
                        self._subscriber,
                        exc,
                        delay,
                    )
                    self._stopped.wait(delay)
                    continue
                if notification is None:
                    return None
                backoff.reset()
                if notification.event_type in self._types:
                    payload = notification_payload(notification)
                    payload["table_location"] = self._locations.get(payload["table"])
                    return payload
            return None

    def _open(self) -> Iterator[Notification]:
        if self._iterator is not None:
            return self._iterator
        self._reader = open_reader(self._settings, durable=True)
        self._locations = {name: self._reader.get_table(name).location for name in self._tables}
        consumer = self._consumer = self._factory(
            self._tables,
            settings=self._settings,
            subscriber=self._subscriber,
            catalog=self._reader,
        )
        consumer.start()
        if self._stopped.is_set():
            consumer.stop()
        logger.info(
            "hcat event stream subscriber=%s tables=%s types=%s cursor=%s",
            self._subscriber,
            ",".join(self._tables),
            ",".join(sorted(self._types)),
            consumer.cursor,
        )
        self._iterator = consumer.notifications()
        return self._iterator

    def _discard(self) -> None:
        consumer, self._consumer, self._iterator = self._consumer, None, None
        reader, self._reader = self._reader, None
        if consumer is not None:
            consumer.close()
        if reader is not None:
            reader.close()

    def stop(self) -> None:
        """Make a blocked :meth:`next` return None within about a second (any thread)."""
        self._stopped.set()
        consumer = self._consumer
        if consumer is not None:
            consumer.stop()

    def close(self) -> None:
        """Stop, wait for a running :meth:`next`, then record what was handled and give
        the subscriber name up."""
        self.stop()
        with self._lock:
            self._discard()
