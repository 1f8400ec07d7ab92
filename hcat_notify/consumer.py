"""The consumer library: subscribe first, then catch up, then stream; no gaps, no repeats.

Start-up follows the HCatalog design: SUBSCRIBE to the tables' topics and wait for the
receipts (only then is a subscription live), then read what was committed before —
unexpired MARK_SET_DONE messages from the retention table or, given a cursor, every event
of the tables after its topic's watermark — then stream live messages. Anything
committed after the catch-up read is published after the subscription began, so it
arrives live; anything in both is delivered once, because every message carries
``HCAT_EVENT_ID`` and the consumer drops ids at or below its topic's watermark or
already seen.

A durable subscriber (``subscriber="name"``) keeps its watermarks in the catalog, moved
after each handled notification, so a restarted consumer resumes exactly there. After a
dropped connection the consumer reconnects, subscribes again and catches up from its
watermarks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hcat_notify.broker.backoff import Backoff
from hcat_notify.broker.connection import BrokerConnection, ReceivedMessage, consumer_connection
from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerError,
    HcatNotifyError,
    InvalidInputError,
    SubscriberTakenOverError,
    TableDroppedError,
)
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.events import HEADER_TABLE, EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import destination_for
from hcat_notify.notification import Notification, Source, from_message, from_outbox
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent, RetainedDone, TableInfo
from hcat_notify.store.subscriptions import (
    FLOOR_KEY,
    SUBSCRIBER_TIMEOUT,
    this_process,
    validate_subscriber,
)

__all__ = ["Notification", "NotificationConsumer", "Source"]

logger = logging.getLogger(__name__)

# Delivered event ids remembered for dropping duplicates. Duplicates come from a relay
# resending a batch whose receipt it missed, and from the overlap of catch-up and live
# delivery: both are recent, so a bounded window is enough.
DEDUPE_WINDOW = 200_000
CATCH_UP_PAGE = 5_000


class CatalogReader(Protocol):
    """What a consumer reads of the catalog: :class:`~hcat_notify.store.Catalog` (the
    database) or a client of the HTTP API. Durable subscribers need the database."""

    def get_table(self, table: TableName | str) -> TableInfo: ...

    def list_tables(self, db: str | None = None) -> list[TableInfo]: ...

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> Sequence[OutboxEvent]: ...

    def find_covering_done(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> RetainedDone | None: ...

    def last_event_id(self) -> int: ...

    def close(self) -> None: ...


@dataclass
class _Subscription:
    topic: str
    tables: list[TableName] = field(default_factory=list)
    # True when the topic also carries other tables: filter on the broker.
    shared: bool = False

    def selector(self) -> str | None:
        if not self.shared:
            return None
        names = ", ".join(f"'{table}'" for table in self.tables)
        return f"{HEADER_TABLE} IN ({names})"


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
            :class:`CatalogReader` (default: the HTTP API if ``api_url`` or the
            settings' ``api_url`` names it, else the catalog database of ``settings``).
        api_url: read through the HTTP API at this URL (or these, failing over; a
            string may list several, comma-separated) instead of the database. A
            durable subscriber reads the database whatever the settings say.
        connection_factory: builds the unconnected consumer connection.
        on_error: called with (notification, exception) when a handler raises.

    Use as a context manager; :meth:`start` subscribes and catches up, :meth:`run` or
    iteration delivers.

    Raises:
        InvalidInputError: no tables, a cursor that does not parse, or both a cursor
            and a subscriber.
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
        self._heartbeat: threading.Thread | None = None
        self._connection: BrokerConnection | None = None
        self._subscriber = subscriber
        self._settings = settings or load_settings()
        self._own_catalog = catalog is None
        self._catalog: CatalogReader = catalog or self._open_reader(api_url)
        self._factory = connection_factory
        self._on_error = on_error
        names = [t if isinstance(t, TableName) else TableName.parse(t) for t in tables]
        self._names = list(dict.fromkeys(names))  # every followed table, in order
        self._followed = frozenset(str(name) for name in self._names)
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
        except BaseException:
            self.close()
            raise
        self._marks: dict[str, int] = dict(start.watermarks)  # delivered, per topic
        self._default = start.default  # the given cursor's watermark for other topics
        self._floor: int | None = None  # where a later catch-up starts for quiet topics
        self._takeover = takeover
        self._owner = this_process()
        self._taken_over: BaseException | None = None
        self._handled: Notification | None = None  # delivered, its handling not recorded
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._backlog: Iterator[OutboxEvent] = iter(())  # the catch-up page being handed out
        # Catch-up is read in pages as it is handed out: the first notification comes at
        # once and memory stays bounded however much was retained.
        self._catchup_cursor: Cursor | None = None
        self._catchup_page_after: int | None = None  # None: no catch-up in progress
        self._pending_ack: ReceivedMessage | None = None
        self._floor_pending = False
        self._subscriptions = self._plan_subscriptions()

    # -- setup --------------------------------------------------------------------------

    def _open_reader(self, api_url: str | Sequence[str] | None) -> CatalogReader:
        """The HTTP API when its URLs are given or set (not for a durable subscriber:
        its watermarks live in the database), else the catalog database."""
        urls = api_url or (self._settings.api_urls if self._subscriber is None else ())
        if not urls:
            return Catalog.open(self._settings)
        from hcat_notify.api.client import ApiClient

        return ApiClient.from_settings(self._settings, urls)

    def _plan_subscriptions(self) -> list[_Subscription]:
        by_topic: dict[str, _Subscription] = {}
        topics = {name: info.topic for name, info in self._tables.items()}
        topics.update({name: str(exc.topic) for name, exc in self._dropped.items()})
        for name, topic in topics.items():
            by_topic.setdefault(topic, _Subscription(topic)).tables.append(name)
        # A per-database or single topic carries other tables too, and so may a topic
        # named by an override: filter on the broker there. _accept() filters again, so
        # correctness does not depend on the selector.
        all_tables = self._catalog.list_tables()
        for subscription in by_topic.values():
            others = any(t.topic == subscription.topic and t.name not in topics for t in all_tables)
            own = all(
                subscription.topic.endswith(f".{name.db}.{name.table}")
                for name in subscription.tables
            )
            subscription.shared = others or not own or len(subscription.tables) > 1
        return list(by_topic.values())

    @property
    def tables(self) -> list[TableName]:
        return list(self._names)

    @property
    def cursor(self) -> Cursor:
        """Where this consumer stands: per topic, the highest event id delivered."""
        return Cursor(self._marks, self._default if self._default is not None else self._floor)

    @property
    def subscriber(self) -> str | None:
        return self._subscriber

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
        if self._subscriber is not None and self._heartbeat is None:
            self._claim()
        self._connect_and_subscribe()
        self._catch_up()

    def _claim(self) -> None:
        assert self._subscriber is not None
        info = self._database().subscriptions.claim(
            self._subscriber, self._owner, takeover=self._takeover
        )
        stored = dict(info.watermarks)
        self._floor = stored.pop(FLOOR_KEY, None)
        self._marks = stored
        logger.info(
            "consumer subscriber=%s claimed by %s cursor=%s",
            self._subscriber,
            self._owner,
            self.cursor,
        )
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"hcat-subscriber-{self._subscriber}", daemon=True
        )
        self._heartbeat.start()

    def _beat(self) -> None:
        assert self._subscriber is not None
        while not self._stop.wait(SUBSCRIBER_TIMEOUT / 4):
            try:
                self._database().subscriptions.heartbeat(self._subscriber, self._owner)
            except SubscriberTakenOverError as exc:
                self._taken_over = exc
                self._stop.set()
                return
            except HcatNotifyError as exc:  # the database hiccuped: beat again soon
                logger.warning("consumer heartbeat failed subscriber=%s: %s", self._subscriber, exc)

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
        cursor = self.cursor
        if not cursor:
            # No past: the unexpired dones, then live. A later catch-up (reconnect,
            # restart) starts at what exists now for topics that stay quiet.
            self._floor = self._catalog.last_event_id()
            self._floor_pending = self._subscriber is not None
            self._catchup_cursor = None
        else:
            self._catchup_cursor = cursor
        self._catchup_page_after = 0
        logger.info("consumer catch-up after=%s", cursor or "retained dones")
        self._load_catch_up_page()

    def _load_catch_up_page(self) -> None:
        if self._catchup_page_after is None:
            return
        events = self._catalog.catch_up(
            list(self._names),
            cursor=self._catchup_cursor,
            page_after=self._catchup_page_after,
            limit=CATCH_UP_PAGE,
        )
        self._backlog = iter(events)
        if len(events) < CATCH_UP_PAGE:
            self._catchup_page_after = None
        else:
            self._catchup_page_after = events[-1].event_id

    # -- delivery ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Make :meth:`run` / iteration return after the current notification."""
        self._stop.set()

    def _accept(self, table: str, topic: str, event_id: int) -> bool:
        """Whether an event is new to this consumer (and now delivered): of a followed
        table, above its topic's watermark, not seen before."""
        if table not in self._followed:
            return False  # a shared topic's other tables, if no selector filtered them
        mark = self._marks.get(topic, self._default)
        if mark is not None and event_id <= mark:
            return False  # delivered before (this run, or before the cursor)
        seen = self._seen
        if event_id in seen:
            logger.debug("consumer dropped duplicate event=%d", event_id)
            return False
        seen[event_id] = None
        if len(seen) > DEDUPE_WINDOW:
            seen.popitem(last=False)
        self._marks[topic] = event_id
        return True

    def _record_handled(self) -> None:
        """A durable subscriber's watermark moves once its handler returned."""
        notification, self._handled = self._handled, None
        if notification is None or self._subscriber is None:
            return
        self._database().subscriptions.advance(
            self._subscriber, self._owner, {notification.topic: notification.event_id}
        )

    def _record_floor(self) -> None:
        """The first catch-up is handled: a restart catches up by cursor from here on."""
        if self._subscriber is None or self._floor is None:
            return
        self._database().subscriptions.advance(
            self._subscriber, self._owner, {FLOOR_KEY: self._floor}
        )

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
            self._backlog = iter(())
            self._catch_up()
            return True
        return False

    def _next(self, timeout: float) -> Notification | None:
        """The next new notification, or None when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            for event in self._backlog:
                if self._accept(event.table, event.topic, event.event_id):
                    done = event.event_type is EventType.MARK_SET_DONE
                    return from_outbox(event, Source.RETAINED if done else Source.REGISTRY)
            if self._catchup_page_after is not None:
                self._load_catch_up_page()
                continue
            if self._floor_pending:
                # Every catch-up notification was handled: from now on a restart of a
                # durable subscriber catches up by cursor, from here.
                self._floor_pending = False
                self._record_handled()
                self._record_floor()
            if self._dropped and not self._tables:
                # Every followed table was dropped before this start, and the catch-up
                # (the DROP_TABLE, if this consumer had not seen it) is handled.
                first = next(iter(self._dropped.values()))
                raise TableDroppedError(str(first), event_id=first.event_id, topic=first.topic)
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
            if live is None or not self._accept(str(live.table), live.topic, live.event_id):
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
        if self._taken_over is not None:
            raise self._taken_over

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
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> bool:
        """Whether an unexpired MARK_SET_DONE covers ``spec`` (the catalog's view)."""
        return self._catalog.find_covering_done(table, spec) is not None

    def wait_for_set_done(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None],
        timeout: float,
    ) -> bool:
        """Wait until a MARK_SET_DONE covering ``spec`` is retained or arrives.

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
        if self.is_set_done(name, wanted):
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
            if notification.table == name and notification.event_type is EventType.DROP_TABLE:
                raise TableDroppedError(
                    f"table {name} was dropped (event {notification.event_id}) while waiting "
                    f"for {wanted.canonical()}",
                    event_id=notification.event_id,
                    topic=notification.topic,
                )
            if (
                notification.event_type is EventType.MARK_SET_DONE
                and notification.table == name
                and notification.spec is not None
                and notification.spec.covers(wanted)
            ):
                return True
        return False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect; a durable subscriber records what was handled and gives its name
        up, so a restart needs no takeover."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(10)
            self._heartbeat = None
            if self._taken_over is None and self._subscriber is not None:
                try:
                    self._record_handled()
                    self._database().subscriptions.release(self._subscriber, self._owner)
                except HcatNotifyError as exc:
                    logger.warning("consumer could not release %s: %s", self._subscriber, exc)
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
