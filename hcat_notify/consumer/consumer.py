"""The consumer: subscribe, catch up, then stream, each notification delivered once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from hcat_notify.broker.backoff import Backoff
from hcat_notify.broker.connection import BrokerConnection, ReceivedMessage, consumer_connection
from hcat_notify.config import Settings, load_settings
from hcat_notify.consumer.catchup import CatchUp
from hcat_notify.consumer.durable import DurableClaim
from hcat_notify.consumer.matching import Condition, Target
from hcat_notify.consumer.reader import CatalogReader, open_reader
from hcat_notify.consumer.topics import plan_subscriptions
from hcat_notify.consumer.watermarks import Watermarks
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerError,
    HcatNotifyError,
    InvalidInputError,
    TableDroppedError,
)
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import destination_for
from hcat_notify.notification import Notification, Source, from_message, from_outbox
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import TableInfo
from hcat_notify.store.subscriptions import validate_subscriber

__all__ = ["NotificationConsumer"]

logger = logging.getLogger(__name__)


def _check_cursor_topics(cursor: Cursor, followed: set[str]) -> None:
    """A cursor's watermarks must be of followed topics: one of another (a mistyped
    topic) would leave the followed one without a watermark, caught up from its start."""
    unknown = sorted(set(cursor.watermarks) - followed)
    if unknown:
        raise InvalidInputError(
            f"the cursor names topic {unknown[0]!r}, which none of the tables followed "
            f"uses (theirs: {', '.join(sorted(followed))}); give their topics' watermarks, "
            "or *:N for every topic"
        )


class NotificationConsumer:
    """Subscribes to tables' notifications; catches up from the catalog; drops repeats.

    Args:
        tables: ``db.table`` names to follow.
        settings: deployment settings (default: :func:`load_settings`).
        cursor: where this consumer stands: a :class:`~hcat_notify.model.cursor.Cursor`,
            its string form, or an old integer cursor (every topic at that id). Events
            of the tables after their topic's watermark are delivered at start-up.
            None: the unexpired dones, then live.
        subscriber: a durable subscriber name: the watermarks live in the catalog,
            moved after each handled notification; a restart resumes there. Another
            live process under the same name is refused (see ``takeover``).
        takeover: take ``subscriber`` over from a live owner (which then stops).
        catalog: where to read tables and catch up: an open :class:`Catalog` or another
            :class:`CatalogReader` (default: :func:`open_reader`: the HTTP API if
            ``api_url`` or the settings' ``api_url`` names it, else the catalog database
            of ``settings``, which must exist).
        api_url: read through the HTTP API at this URL (or these, failing over; a
            string may list several, comma-separated) instead of the database. A
            durable subscriber reads the database whatever the settings say.
        connection_factory: builds the unconnected consumer connection.
        on_error: called with (notification, exception) when a handler raises.

    Use as a context manager; :meth:`start` subscribes and catches up, :meth:`run` or
    iteration delivers.

    Raises:
        InvalidInputError: no tables, a cursor that does not parse or names a topic
            none of the tables uses, or both a cursor and a subscriber.
    """

    def __init__(
        self,
        tables: Sequence[TableName | str],
        *,
        settings: Settings | None = None,
        cursor: Cursor | str | int | None = None,
        subscriber: str | None = None,
        takeover: bool = False,
        catalog: CatalogReader | None = None,
        api_url: str | Sequence[str] | None = None,
        connection_factory: Callable[[Settings], BrokerConnection] = consumer_connection,
        on_error: Callable[[Notification, BaseException], None] | None = None,
    ) -> None:
        if not tables:
            raise InvalidInputError("give at least one table to consume")
        start = cursor if isinstance(cursor, Cursor) else Cursor.parse(cursor)
        if start and subscriber is not None:
            raise InvalidInputError(
                "give a cursor or a subscriber, not both: a subscriber keeps its own"
            )
        if subscriber is not None:
            validate_subscriber(subscriber)
            if (catalog is not None and not isinstance(catalog, Catalog)) or api_url:
                raise InvalidInputError(
                    "a durable subscriber keeps its watermarks in the catalog database: "
                    "it needs database access, not only the HTTP API"
                )
        self._stop = threading.Event()
        self._connection: BrokerConnection | None = None
        self._settings = settings or load_settings()
        self._own_catalog = catalog is None
        self._catalog: CatalogReader = catalog or open_reader(
            self._settings, api_url=api_url, durable=subscriber is not None
        )
        self._durable = (
            None
            if subscriber is None
            else DurableClaim(self._database(), subscriber, self._stop, takeover=takeover)
        )
        self._factory = connection_factory
        self._on_error = on_error
        names = [t if isinstance(t, TableName) else TableName.parse(t) for t in tables]
        self._names = list(dict.fromkeys(names))  # every followed table, in order
        self._tables: dict[TableName, TableInfo] = {}  # the registered ones
        # Dropped before this start: caught up through their DROP_TABLE (a consumer with
        # a past may not have seen it), then the drop is raised if nothing else is left.
        self._dropped: dict[TableName, TableDroppedError] = {}
        try:
            for name in self._names:
                try:
                    self._tables[name] = self._catalog.get_table(name)
                except TableDroppedError as exc:
                    if exc.topic is None or not (start or subscriber is not None):
                        raise  # no past to catch up: the drop is all there is to say
                    logger.info("consumer follows %s, which was dropped: %s", name, exc)
                    self._dropped[name] = exc
            topics = {name: info.topic for name, info in self._tables.items()}
            topics.update({name: str(exc.topic) for name, exc in self._dropped.items()})
            _check_cursor_topics(start, set(topics.values()))
        except BaseException:
            self.close()
            raise
        self._marks = Watermarks(start, (str(name) for name in self._names))
        self._catchup = CatchUp(self._catalog, self._names)
        self._handled: Notification | None = None  # delivered, its handling not recorded
        self._legacy_floor: int | None = None  # see _catch_up: an older version's subscriber
        self._pending_ack: ReceivedMessage | None = None
        self._subscriptions = plan_subscriptions(topics, self._catalog.list_tables())

    # -- setup --------------------------------------------------------------------------

    @property
    def tables(self) -> list[TableName]:
        return list(self._names)

    @property
    def cursor(self) -> Cursor:
        """Where this consumer stands: per topic, the highest event id delivered (started
        without a cursor: at least its floor; while it hands out the retained dones, the
        last one handed, for every topic)."""
        return self._marks.cursor

    @property
    def subscriber(self) -> str | None:
        return None if self._durable is None else self._durable.name

    def _database(self) -> Catalog:
        assert isinstance(self._catalog, Catalog)  # checked for durable subscribers
        return self._catalog

    def start(self) -> None:
        """Claim the subscriber (if durable), connect, subscribe (waiting for each
        receipt), then catch up from the catalog.

        Raises:
            SubscriberInUseError: another live process consumes under the subscriber.
            BrokerError: the broker cannot be reached or refused the subscription.
        """
        durable = self._durable
        if durable is not None and not durable.held:
            followed = {str(t): s.topic for s in self._subscriptions for t in s.tables}
            self._marks.resume(*durable.claim(followed))
            logger.info(
                "consumer subscriber=%s claimed by %s cursor=%s",
                durable.name,
                durable.owner,
                self.cursor,
            )
        self._connect_and_subscribe()
        self._catch_up()

    def _connect_and_subscribe(self) -> None:
        # One BrokerConnection for the consumer's life: connecting it again after a loss
        # starts with the broker after the lost one (a pair's slave taking over).
        connection = self._connection
        if connection is None:
            connection = self._connection = self._factory(self._settings)
        connection.connect()
        try:
            for index, subscription in enumerate(self._subscriptions):
                connection.subscribe(
                    destination_for(subscription.topic),
                    f"hcat-{index}",
                    ack="client-individual",
                    selector=subscription.selector(),
                )
        except BaseException:
            connection.close()
            raise
        logger.info(
            "consumer subscribed topics=%s broker=%s",
            ",".join(s.topic for s in self._subscriptions),
            connection.address,
        )

    def _catch_up(self) -> None:
        # Only after the subscriptions are live (invariant 5).
        marks = self._marks
        floor = marks.floor
        if marks.retained_pending and floor is not None:
            # A durable subscriber stopped in its first catch-up: the rest of the retained
            # dones up to its floor (its watermarks drop what it handled), then every
            # event after the floor.
            self._catchup.begin(None, through=floor, then=marks.after_floor(floor))
            return
        cursor = marks.cursor
        durable = self._durable
        if cursor:
            if durable is not None and floor is None:
                # Stored by an earlier version (watermarks, no floor; it may have run live
                # for weeks so): resume by its watermarks exactly, as that version did,
                # and once this catch-up is handled store the floor read before it.
                self._legacy_floor = self._catalog.last_event_id()
            self._catchup.begin(cursor)
            return
        # No past: the unexpired dones up to what exists now, then live. A later
        # catch-up (reconnect, restart) starts at that floor for every topic.
        marks.floor = self._catalog.last_event_id()
        marks.retained_pending = True
        if durable is not None:
            durable.record_start(marks.floor)
        self._catchup.begin(None, through=marks.floor)

    # -- delivery ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Make :meth:`run` / iteration return after the current notification."""
        self._stop.set()

    def _take_handled(self) -> dict[str, int] | None:
        """The watermark the notification handed out last moves to (None: none)."""
        notification, self._handled = self._handled, None
        return None if notification is None else {notification.topic: notification.event_id}

    def _record_handled(self) -> None:
        """A durable subscriber's watermark moves once its handler returned."""
        handled = self._take_handled()
        if handled is not None and self._durable is not None:
            self._durable.advance(handled)

    def _catch_up_handled(self) -> None:
        """Every catch-up notification was handled: from now on a catch-up (reconnect,
        restart of a durable subscriber) goes by cursor, from the floor."""
        legacy, self._legacy_floor = self._legacy_floor, None
        if legacy is not None and self._durable is not None:
            # Everything of its tables up to ``legacy`` is handled now.
            self._marks.floor = legacy
            self._record_handled()
            self._durable.record_floor(legacy, self._marks.marks)
            return
        if not self._marks.retained_pending:
            return
        self._marks.retained_pending = False
        floor = self._marks.floor
        if self._durable is not None and floor is not None:
            self._record_handled()
            self._durable.record_floor(floor, self._marks.marks)

    def _reconnect(self, deadline: float) -> bool:
        """Connect again, subscribe (waiting for each receipt), then catch up from the
        watermarks; retried with back-off. False when ``deadline`` (monotonic) passed
        first or the consumer was stopped.

        Whatever was published while no subscription was live is in the catalog after
        the watermarks, so the catch-up leaves no gap, and the watermarks drop what
        arrives twice.
        """
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                self._connect_and_subscribe()
            except BrokerAuthError:
                raise
            except BrokerError as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                wait = min(backoff.next_delay(), remaining)
                logger.warning("consumer reconnect failed error=%r retry_in=%.2fs", str(exc), wait)
                self._stop.wait(wait)
                continue
            # The pending catch-up (if any) is read again from the watermarks.
            self._catch_up()
            return True
        return False

    def _next_caught_up(self) -> Notification | None:
        """The next new notification of the catch-up page being handed out."""
        for event in self._catchup.page:
            if self._marks.accept(event.table, event.topic, event.event_id):
                done = event.event_type is EventType.MARK_SET_DONE
                return from_outbox(event, Source.RETAINED if done else Source.REGISTRY)
        return None

    def _raise_if_all_dropped(self) -> None:
        if self._dropped and not self._tables:
            # Every followed table was dropped before this start, and the catch-up
            # (the DROP_TABLE, if this consumer had not seen it) is handled.
            first = next(iter(self._dropped.values()))
            raise TableDroppedError(str(first), event_id=first.event_id, topic=first.topic)

    def _next(self, timeout: float) -> Notification | None:
        """The next new notification, or None when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            caught_up = self._next_caught_up()
            if caught_up is not None:
                return caught_up
            if self._catchup.next_page():
                continue
            self._catch_up_handled()
            self._raise_if_all_dropped()
            connection = self._connection
            if connection is None:
                raise HcatNotifyError(
                    "consumer not started: call start() or use it as a context manager"
                )
            if not connection.is_connected:
                logger.warning("consumer lost its broker connection; reconnecting")
                if not self._reconnect(deadline):
                    return None
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            message = connection.receive(timeout=min(remaining, 0.5))
            if message is None:
                continue
            live = from_message(message)
            if live is None or not self._marks.accept(str(live.table), live.topic, live.event_id):
                connection.ack(message)
                continue
            self._pending_ack = message
            return live
        return None

    def _ack_current(self) -> None:
        self._record_handled()
        message = self._pending_ack
        if message is not None and self._connection is not None:
            self._pending_ack = None
            try:
                self._connection.ack(message)
            except BrokerError as exc:  # the broker forgets it on reconnect anyway
                logger.debug("consumer ack failed: %s", exc)

    def notifications(self, *, timeout: float | None = None) -> Iterator[Notification]:
        """Yield notifications (catch-up first, then live) until stopped or idle.

        A durable subscriber's watermark moves past a notification as soon as the caller
        asks for the next one, before waiting for it.

        Args:
            timeout: stop after this many seconds without a new notification
                (None: never).
        """
        while not self._stop.is_set():
            notification = self._next(timeout if timeout is not None else 3600.0)
            self._ack_current()
            if notification is None:
                if timeout is not None:
                    break
                continue
            self._handled = notification
            yield notification
            # The caller is back: record it now, not when the next message comes (a
            # process killed while idle would otherwise handle it again on restart).
            self._ack_current()
        self._ack_current()
        if self._durable is not None and self._durable.taken_over is not None:
            raise self._durable.taken_over

    def run(
        self,
        handler: Callable[[Notification], object],
        *,
        max_messages: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Call ``handler`` for each notification; return how many were handled.

        A handler that raises is reported (``on_error`` or the log) and the loop goes
        on; the message is acknowledged after the handler returns either way.
        """
        handled = 0
        for notification in self.notifications(timeout=timeout):
            try:
                handler(notification)
            except Exception as exc:  # reported; must not kill the loop
                if self._on_error is not None:
                    self._on_error(notification, exc)
                else:
                    logger.exception("handler failed for event %d", notification.event_id)
            handled += 1
            if max_messages is not None and handled >= max_messages:
                self._ack_current()
                break
        return handled

    # -- mark-set-done queries ------------------------------------------------------------------

    def is_set_done(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None],
        *,
        min_generation: int | None = None,
    ) -> bool:
        """Whether an unexpired MARK_SET_DONE covers ``spec`` (the catalog's view), of
        set generation ``min_generation`` or later if given."""
        found = self._catalog.find_covering_done(table, spec, min_generation=min_generation)
        return found is not None

    def wait_for_set_done(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None],
        timeout: float,
        *,
        min_generation: int | None = None,
    ) -> bool:
        """Wait until a MARK_SET_DONE covering ``spec`` is retained or arrives (of set
        generation ``min_generation`` or later, if given). A SET_LATE or SET_REOPENED
        does not end the wait.

        The consumer must be started (subscribed) first, so that a done sent while this
        checks the catalog is not missed.

        Returns:
            True once covered, False at the timeout.

        Raises:
            TableDroppedError: the table was dropped (before or while waiting): no done
                will come.
        """
        name = table if isinstance(table, TableName) else TableName.parse(table)
        if name in self._dropped:
            raise self._dropped[name]
        if name not in self._tables:
            raise InvalidInputError(f"the consumer does not follow {name}")
        wanted = self._tables[name].spec(spec, partial=True)
        target = Target(Condition.DONE, name, wanted, min_generation=min_generation)
        if self.is_set_done(name, target.spec, min_generation=min_generation):
            return True
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            notification = self._next(remaining)
            if notification is None:
                return False
            self._handled = notification
            self._ack_current()  # looked at: handled, whatever it says
            if target.match(notification) is not None:
                return True
        return False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect; a durable subscriber records what was handled and gives its name
        up, so a restart needs no takeover."""
        self._stop.set()
        if self._durable is not None and self._durable.held:
            self._durable.release(self._take_handled())
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._own_catalog:
            self._catalog.close()

    def __enter__(self) -> NotificationConsumer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
