"""The outbox relay: publishes committed events to ActiveMQ, in event-id order.

An event is marked published only after the broker's RECEIPT for it (a receipt on the
COMMIT of the STOMP transaction that carried it). When the outcome of a batch is unknown
(timeout, dropped connection) nothing is marked, and the batch is sent again after
reconnecting: the wire is at-least-once, and consumers drop duplicates by
``HCAT_EVENT_ID``.

One relay publishes at a time: it holds a lease row in the catalog, renewed by
compare-and-set; others wait as standbys and take over when the lease expires.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hcat_notify.broker.backoff import Backoff
from hcat_notify.broker.connection import BrokerConnection, error_for, publisher_connection
from hcat_notify.broker.errors import BrokerFault, classify
from hcat_notify.config import Settings
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerCredentialsError,
    BrokerError,
    BrokerRejectedError,
    BrokerUnavailableError,
    HcatNotifyError,
)
from hcat_notify.model.topics import destination_for
from hcat_notify.relay.config import DEFAULT_LEASE_NAME, RelayConfig
from hcat_notify.relay.wakeup import OutboxWaiter, outbox_waiter
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent

__all__ = ["Relay", "RelayStats"]

logger = logging.getLogger(__name__)


def _refused_or_rolled_back(exc: BrokerError) -> bool:
    # ActiveMQ answers a COMMIT after a refused SEND with "COMMIT FAILED: Transaction
    # marked rollback only": nothing of the transaction was delivered. A SEND it cannot
    # even parse (a header over its limit) fails the transaction's COMMIT too.
    return isinstance(exc, BrokerAuthError | BrokerRejectedError) or (
        classify(str(exc)) is BrokerFault.ROLLED_BACK
    )


@dataclass
class RelayStats:
    """What a relay has done since it started."""

    published: int = 0
    batches: int = 0
    connects: int = 0
    failures: int = 0
    last_publish_at: datetime | None = None
    blocked_topics: dict[str, str] = field(default_factory=dict)
    refusals: int = 0  # refusals of single events by the broker
    refused: dict[int, str] = field(default_factory=dict)  # event id -> the broker's reason
    parked: dict[int, str] = field(default_factory=dict)  # event id -> why it was parked


class Relay:
    """Publishes the outbox to the broker until stopped.

    Args:
        settings: deployment settings (database, broker, credentials).
        config: batching, waiting and back-off.
        catalog: an open catalog to use (default: opened from ``settings``).
        connection_factory: builds the (unconnected) publisher connection.
        owner: the lease owner name (default: ``host:pid``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        config: RelayConfig | None = None,
        catalog: Catalog | None = None,
        connection_factory: Callable[[Settings], BrokerConnection] = publisher_connection,
        owner: str | None = None,
    ) -> None:
        self._settings = settings
        self._config = config or RelayConfig()
        self._own_catalog = catalog is None
        self._catalog = catalog or Catalog.open(settings)
        self._factory = connection_factory
        self._owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._connection: BrokerConnection | None = None
        self._stop = threading.Event()
        self._blocked: dict[str, float] = {}  # topic -> monotonic time to retry
        self._draining = False
        self._lease_until = 0.0  # monotonic time the lease must be renewed by
        # Receipted events are marked published by a background thread, off the publish
        # path (SQLite's write lock can take 100+ ms under load). Until then they are
        # "unmarked": never sent again by this relay, and the outbox is read past the
        # highest receipted id.
        self._high_water = 0
        self._unmarked: set[int] = set()
        self._unmarked_lock = threading.Lock()
        self._marks: queue.Queue[list[int] | None] = queue.Queue()
        self._marker: threading.Thread | None = None
        self.stats = RelayStats()

    # -- lifecycle ----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the relay to stop after the in-flight batch (safe from signal handlers)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        """Disconnect, give up the lease and close the catalog if the relay opened it."""
        self._stop_marker()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._lease_until:
            try:
                self._catalog.release_lease(DEFAULT_LEASE_NAME, self._owner)
            except HcatNotifyError as exc:  # the lease expires by itself anyway
                logger.warning("relay could not release its lease: %s", exc)
            self._lease_until = 0.0
        if self._own_catalog:
            self._catalog.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one pass -----------------------------------------------------------------------

    def drain(self) -> int:
        """Publish every pending event now and return how many; for ``relay --once``.

        Raises:
            BrokerError: the broker cannot be reached or refused the batch.
            HcatNotifyError: another relay holds the lease.
        """
        if not self._hold_lease():
            lease = self._catalog.get_lease(DEFAULT_LEASE_NAME)
            holder = lease.owner if lease else "another relay"
            raise HcatNotifyError(f"the outbox is owned by relay {holder}; not publishing")
        total = 0
        self._draining = True  # a refused topic is tried again at once, until parked
        try:
            while not self.stopping:
                refusals = self.stats.refusals
                published = self._publish_next_batch()
                total += published
                if published == 0 and self.stats.refusals == refusals:
                    break
        finally:
            self._draining = False
            self._stop_marker()  # everything receipted is marked before returning
        return total

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> RelayStats:
        """Publish until :meth:`stop`; reconnect with back-off after failures."""
        waiter = outbox_waiter(self._settings.database_url)
        backoff = Backoff(self._config.backoff_initial, self._config.backoff_max)
        logger.info(
            "relay starting owner=%s database=%s brokers=%s",
            self._owner,
            self._catalog.url,
            self._settings.broker_url,
        )
        try:
            while not self.stopping:
                if not self._hold_lease():
                    logger.debug("relay standby: lease held elsewhere")
                    self._stop.wait(self._config.lease_ttl / 3)
                    continue
                try:
                    published = self._publish_next_batch()
                except BrokerCredentialsError:
                    raise  # a wrong user or password: retrying cannot help
                except BrokerError as exc:
                    self.stats.failures += 1
                    self._drop_connection()
                    delay = backoff.next_delay()
                    logger.warning("relay broker failure error=%r retry_in=%.2fs", str(exc), delay)
                    self._stop.wait(delay)
                    continue
                except HcatNotifyError as exc:  # database trouble: keep trying
                    self.stats.failures += 1
                    delay = backoff.next_delay()
                    logger.warning("relay store failure error=%r retry_in=%.2fs", str(exc), delay)
                    self._stop.wait(delay)
                    continue
                backoff.reset()
                if published == 0:
                    self._idle(waiter)
        finally:
            waiter.close()
            self._stop_marker()
            logger.info(
                "relay stopped published=%d batches=%d connects=%d failures=%d",
                self.stats.published,
                self.stats.batches,
                self.stats.connects,
                self.stats.failures,
            )
        return self.stats

    def _idle(self, waiter: OutboxWaiter) -> None:
        # Wake for new events, the lease renewal, a blocked topic's retry or a stop.
        wait = self._config.idle_wait
        wait = min(wait, max(0.01, self._lease_until - time.monotonic() - self._renew_margin()))
        if self._blocked:
            wait = min(wait, max(0.01, min(self._blocked.values()) - time.monotonic()))
        deadline = time.monotonic() + wait
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            # Short slices so that stop() is honoured promptly.
            if waiter.wait(min(remaining, 0.25)):
                return

    # -- internals ----------------------------------------------------------------------

    def _renew_margin(self) -> float:
        return self._config.lease_ttl / 3

    def _hold_lease(self) -> bool:
        if time.monotonic() < self._lease_until - self._renew_margin():
            return True
        lease = self._catalog.acquire_lease(
            DEFAULT_LEASE_NAME, self._owner, timedelta(seconds=self._config.lease_ttl)
        )
        if lease is None:
            if self._lease_until:
                logger.warning("relay lost the outbox lease owner=%s", self._owner)
            self._lease_until = 0.0
            return False
        if not self._lease_until:
            logger.info("relay took the outbox lease owner=%s", self._owner)
        self._lease_until = time.monotonic() + self._config.lease_ttl
        return True

    def _connected(self) -> BrokerConnection:
        if self._connection is not None and self._connection.is_connected:
            return self._connection
        self._drop_connection()
        connection = self._factory(self._settings)
        address = connection.connect()
        self._connection = connection
        self.stats.connects += 1
        logger.info("relay connected broker=%s user=%s", address, self._settings.broker_user)
        return connection

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _unblocked_topics(self) -> list[str]:
        now = time.monotonic()
        for topic, retry_at in list(self._blocked.items()):
            if retry_at <= now:
                del self._blocked[topic]
                self.stats.blocked_topics.pop(topic, None)
                self._high_water = 0  # its events lie behind the high-water mark
        return list(self._blocked)

    def _publish_next_batch(self) -> int:
        events = self._catalog.pending_events(
            after_event_id=self._high_water,
            limit=self._config.batch_size,
            exclude_topics=self._unblocked_topics(),
        )
        with self._unmarked_lock:
            events = [event for event in events if event.event_id not in self._unmarked]
        if not events:
            return 0
        connection = self._connected()
        started = time.monotonic()
        if self._config.use_transactions:
            try:
                self._send_transaction(connection, events)
            except BrokerError as exc:
                if not (_refused_or_rolled_back(exc) or isinstance(exc, BrokerUnavailableError)):
                    raise
                # The broker refused an event (or dropped the connection mid-batch, as it
                # does after a frame it cannot parse). Its ERROR may even arrive after the
                # COMMIT's, so continue on a fresh connection, where no stray ERROR can
                # fail the next waits, and find the event by sending one at a time.
                self._drop_connection()
                return self._send_individually(self._connected(), events)
        else:
            return self._send_individually(connection, events)
        self._mark(events)
        logger.info(
            "relay batch published=%d first=%d last=%d ms=%.1f",
            len(events),
            events[0].event_id,
            events[-1].event_id,
            (time.monotonic() - started) * 1000,
        )
        return len(events)

    def _send_transaction(
        self, connection: BrokerConnection, events: Sequence[OutboxEvent]
    ) -> None:
        errors_before = len(connection.errors)
        transaction = connection.begin()
        committing = False
        try:
            for event in events:
                connection.send(
                    destination_for(event.topic),
                    event.body,
                    event.headers,
                    transaction=transaction,
                    receipt=False,
                )
            committing = True
            connection.commit(transaction)
        except BrokerError as exc:
            if not committing:
                connection.abort(transaction)
            # A refused SEND makes ActiveMQ roll the whole transaction back ("marked
            # rollback only"): nothing of it was delivered. Say why, most specific first.
            cause = error_for(connection.errors[errors_before:], "a batch was refused")
            if cause is not None and type(cause) is not BrokerError:
                raise cause from exc
            raise
        # The broker answers frames in order, so an ERROR for any SEND of this
        # transaction arrived before the COMMIT's receipt: then the batch is not whole.
        cause = error_for(connection.errors[errors_before:], "broker reported errors in a batch")
        if cause is not None:
            raise cause

    def _send_individually(
        self, connection: BrokerConnection, events: Sequence[OutboxEvent]
    ) -> int:
        sent: list[OutboxEvent] = []
        held: dict[str, int] = {}  # topic -> first event not sent in this pass
        try:
            for event in events:
                if event.topic in held:
                    continue  # keep per-topic order: nothing after a refused event
                try:
                    connection.send(destination_for(event.topic), event.body, event.headers)
                except BrokerAuthError as exc:  # the topic is refused to our principal
                    if not self._refused(event, str(exc)):
                        held[event.topic] = event.event_id
                        self._block(event, str(exc))
                    continue
                except BrokerRejectedError as exc:  # this very message cannot be accepted
                    if not self._refused(event, str(exc)):
                        held[event.topic] = event.event_id
                    # The broker drops a connection whose frame it could not parse.
                    self._drop_connection()
                    connection = self._connected()
                    continue
                sent.append(event)
        finally:
            self._mark(sent)
            if held:
                # Read the held events again next time, though later ones were sent.
                self._high_water = min(self._high_water, min(held.values()) - 1)
        return len(sent)

    def _refused(self, event: OutboxEvent, reason: str) -> bool:
        """Count a refusal of ``event``; True once it is parked (then it holds nothing)."""
        self.stats.refused[event.event_id] = reason
        self.stats.refusals += 1
        parked = self._catalog.record_refusal(
            event.event_id, reason, limit=self._config.max_attempts, actor=self._owner
        )
        if parked:
            self.stats.parked[event.event_id] = reason
            logger.error(
                "relay parked undeliverable event=%d topic=%s table=%s after %d refusals "
                "(hcat-notify outbox retry|drop %d) error=%r",
                event.event_id,
                event.topic,
                event.table,
                self._config.max_attempts,
                event.event_id,
                reason,
            )
        else:
            logger.warning(
                "relay event refused event=%d topic=%s error=%r",
                event.event_id,
                event.topic,
                reason,
            )
        return parked

    def _block(self, event: OutboxEvent, reason: str) -> None:
        retry = 0.0 if self._draining else self._config.blocked_topic_retry
        self._blocked[event.topic] = time.monotonic() + retry
        self.stats.blocked_topics[event.topic] = reason
        logger.error(
            "relay topic refused topic=%s event=%d retry_in=%.0fs error=%r",
            event.topic,
            event.event_id,
            retry,
            reason,
        )

    def _mark(self, events: Sequence[OutboxEvent]) -> None:
        """Record receipted events: never resend them; mark them published soon."""
        if not events:
            return
        ids = [event.event_id for event in events]
        with self._unmarked_lock:
            self._unmarked.update(ids)
        self._high_water = max(self._high_water, max(ids))
        self.stats.published += len(events)
        self.stats.batches += 1
        self.stats.last_publish_at = datetime.now(UTC)
        self._start_marker()
        self._marks.put(ids)

    # -- marking published, in the background ------------------------------------------

    def _start_marker(self) -> None:
        if self._marker is None or not self._marker.is_alive():
            self._marker = threading.Thread(
                target=self._mark_loop, name="hcat-relay-marker", daemon=True
            )
            self._marker.start()

    def _mark_loop(self) -> None:
        while True:
            item = self._marks.get()
            if item is None:
                return
            ids = list(item)
            # Coalesce whatever else is queued into one transaction.
            stop = False
            while True:
                try:
                    more = self._marks.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                ids.extend(more)
            self._mark_published(ids)
            if stop:
                return

    def _mark_published(self, ids: list[int]) -> None:
        delay = 0.05
        for _ in range(20):
            try:
                self._catalog.mark_published(ids)
            except HcatNotifyError as exc:
                logger.warning("relay could not mark %d events published: %s", len(ids), exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            with self._unmarked_lock:
                self._unmarked.difference_update(ids)
            return
        # Left unmarked: sent again by the next relay, which consumers drop as duplicates.
        logger.error("relay gave up marking %d events published; they will be resent", len(ids))

    def _stop_marker(self) -> None:
        if self._marker is not None and self._marker.is_alive():
            self._marks.put(None)
            self._marker.join(60)
        self._marker = None
