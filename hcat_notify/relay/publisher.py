"""The relay: a member of the relay group that publishes the topics of its buckets.

An event is published when the broker's RECEIPT for it (on the COMMIT of the STOMP
transaction that carried it) has arrived; only then does the topic's progress move, and
that progress is written fenced by the bucket's epoch, so a member that lost a bucket
(paused, partitioned, slow) cannot move it. When the outcome of a batch is unknown
(timeout, dropped connection) nothing moves, and the batch is sent again: the wire is
at-least-once, and consumers drop duplicates by ``HCAT_EVENT_ID``. Per topic, events go
out in event-id order from the recorded progress, whoever owns the topic's bucket.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hcat_notify.broker.backoff import Backoff
from hcat_notify.broker.connection import BrokerConnection, publisher_connection
from hcat_notify.config import Settings
from hcat_notify.errors import (
    BrokerCredentialsError,
    BrokerError,
    HcatNotifyError,
    InvalidInputError,
)
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.relay.pipeline import Batch, Pipeline, SendResult
from hcat_notify.relay.progress import ProgressWriter
from hcat_notify.relay.sender import BatchSender
from hcat_notify.relay.timed import TimedPass
from hcat_notify.relay.webhooks import WebhookDelivery
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.change_feed import OutboxWaiter, PostgresNotifyWaiter, outbox_waiter
from hcat_notify.store.group import MemberReport
from hcat_notify.store.records import OutboxEvent

__all__ = ["Relay", "RelayStats", "default_member_id"]

logger = logging.getLogger(__name__)

IN_FLIGHT_POLL = 0.05
"""Seconds between looks at the outbox while an open transaction holds event ids."""
IDLE_RECORD_BATCHES = 10
"""Every owned bucket's position is recorded once the cursor moved this many batch
sizes (a restarted relay reads at most about that much again)."""
MAX_MEMBER_ID = 255


def default_member_id() -> str:
    """``host:pid``: unique among the relays of one catalog."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _check_member_id(member_id: str) -> str:
    if (
        not member_id
        or len(member_id) > MAX_MEMBER_ID
        or not member_id.isprintable()
        or any(char.isspace() for char in member_id)
    ):
        raise InvalidInputError(
            f"invalid member id {member_id!r}: 1 to {MAX_MEMBER_ID} printable characters, no spaces"
        )
    return member_id


@dataclass
class RelayStats:
    """What a relay has done since it started."""

    published: int = 0
    batches: int = 0
    connects: int = 0
    failures: int = 0
    last_publish_at: datetime | None = None
    broker: str | None = None  # the broker whose RECEIPT last marked events published
    broker_since: datetime | None = None  # its first such RECEIPT (after a failover: the
    # moment publishing resumed on the new master)
    blocked_topics: dict[str, str] = field(default_factory=dict)
    refusals: int = 0  # refusals of single events by the broker
    refused: dict[int, str] = field(default_factory=dict)  # event id -> the broker's reason
    parked: dict[int, str] = field(default_factory=dict)  # event id -> why it was parked
    buckets_lost: int = 0  # buckets found fenced when recording progress


class Relay:
    """One member of the relay group; publishes its buckets' topics until stopped.

    Args:
        settings: deployment settings (database, broker, credentials, bucket count).
        config: batching, heartbeats, timeouts and back-off.
        catalog: an open catalog to use (default: opened from ``settings``).
        connection_factory: builds the (unconnected) publisher connection.
        member_id: this member's id (default: ``host:pid``).

    Raises:
        InvalidInputError: a malformed member id, or ``settings.relay_buckets`` differs
            from the catalog's bucket count (fixed when the catalog was created).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        config: RelayConfig | None = None,
        catalog: Catalog | None = None,
        connection_factory: Callable[[Settings], BrokerConnection] = publisher_connection,
        member_id: str | None = None,
    ) -> None:
        self._settings = settings
        self._config = config or RelayConfig()
        # An empty id is a mistake to refuse, not a request for the default.
        self.member_id = _check_member_id(default_member_id() if member_id is None else member_id)
        self._joined = False
        self._own_catalog = catalog is None
        # A member paused inside a transaction (SIGSTOP, a frozen VM) would hold its row
        # locks, and with them the whole group, until it runs again: PostgreSQL ends such
        # a session after the session timeout, when the others treat it as gone anyway.
        self._catalog = catalog or Catalog.open(
            settings, idle_in_transaction=self._config.session_timeout
        )
        try:
            self._bucket_count = self._check_buckets()
        except BaseException:
            if self._own_catalog:
                self._catalog.close()
            raise
        self._sender = BatchSender(
            settings,
            connection_factory,
            use_transactions=self._config.use_transactions,
            on_refused=self._refused,
        )
        self._member = Membership(self._catalog, self._config, self.member_id, self._report)
        self._pipeline = Pipeline(
            self._catalog,
            self._sender,
            self._member,
            bucket_count=self._bucket_count,
            batch_size=self._config.batch_size,
            blocked_retry=self._config.blocked_topic_retry,
            on_blocked=self._on_blocked,
        )
        self._timed = TimedPass(
            self._catalog, self._member, self._config.timed_interval, self._lost
        )
        self._webhooks = WebhookDelivery(
            self._catalog, self._member, settings, self._config, self._lost
        )
        self._stop = threading.Event()
        self._was_in_flight = False  # an open transaction held ids at the last idle check
        self.stats = RelayStats()

    def _check_buckets(self) -> int:
        count = self._catalog.group.info().bucket_count
        wanted = self._settings.relay_buckets
        if wanted is not None and wanted != count:
            raise InvalidInputError(
                f"the catalog has {count} relay buckets, fixed when it was created; "
                f"relay_buckets={wanted} cannot change that (leave it unset)"
            )
        return count

    # -- lifecycle ----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the relay to stop after the in-flight batch (safe from signal handlers)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def membership(self) -> Membership:
        """This relay's membership (tests pause its controller through it)."""
        return self._member

    @property
    def timed(self) -> TimedPass:
        """This relay's timed pass over the sets of its buckets (completeness)."""
        return self._timed

    @property
    def webhooks(self) -> WebhookDelivery:
        """This relay's delivery of its buckets' events to webhooks."""
        return self._webhooks

    @property
    def pipeline(self) -> Pipeline:
        """This relay's publishing steps and what it has published."""
        return self._pipeline

    def close(self) -> None:
        """Hand the buckets over, leave the group, disconnect, close the catalog."""
        try:
            self._leave()
        finally:
            self._sender.close()
            if self._own_catalog:
                self._catalog.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _join(self) -> None:
        if not self._joined:
            self._member.join()  # refused when another live process has this member id
            self._pipeline.progress = ProgressWriter(
                self._catalog, self.member_id, self._lost, max_events=self._config.batch_size
            )
            self._joined = True
            if not self._member.alone:  # relay --once runs its passes itself
                self._timed.start()
                self._webhooks.start()
            if self._config.freeze_heap:
                gc.freeze()
            logger.info(
                "relay joined member=%s database=%s brokers=%s buckets=%d",
                self.member_id,
                self._catalog.url,
                self._settings.broker_url,
                self._bucket_count,
            )

    def _leave(self) -> None:
        if not self._joined:
            return
        self._joined = False
        self._timed.stop()  # before the handoff: its pass is fenced by what it owns
        self._webhooks.stop()  # likewise: what has a 2xx is recorded before the handoff
        pipeline = self._pipeline
        if pipeline.progress is not None:
            if pipeline.cursor > pipeline.idle_through:  # where the next owners start reading
                pipeline.record_progress([], pipeline.blocked_from(), every_bucket=True)
            pipeline.progress.close()  # what has receipts is recorded before the handoff
            pipeline.progress = None
        try:
            self._member.leave()
        except HcatNotifyError as exc:  # the others take over after the session timeout
            logger.warning("relay could not leave the group cleanly: %s", exc)
        logger.info(
            "relay left member=%s published=%d batches=%d connects=%d failures=%d",
            self.member_id,
            self.stats.published,
            self.stats.batches,
            self._sender.connects,
            self.stats.failures,
        )

    # -- one pass -----------------------------------------------------------------------

    def drain(self) -> int:
        """Publish every pending event now and return how many, then deliver to the webhooks
        what is due (each endpoint tried once); for ``relay --once``.

        Takes every bucket, so no other relay may be running.

        Raises:
            HcatNotifyError: other relays are running (they publish the outbox).
            BrokerError: the broker cannot be reached or refused the login.
        """
        others = [
            m.member_id
            for m in self._catalog.group.members()
            if m.member_id != self.member_id and m.alive
        ]
        if others:
            raise HcatNotifyError(
                f"relays {', '.join(others)} are running and publish the outbox; "
                "relay --once is for when none runs"
            )
        self._member.alone = True  # it takes every bucket at once
        self._join()
        self._wait_for_buckets(self._bucket_count)
        self._timed.run_once()  # the verdicts due by now are published with the rest
        total = 0
        self._pipeline.draining = True  # a refused topic is tried again at once, until parked
        try:
            while not self.stopping:
                refusals = self.stats.refusals
                handled, published = self._publish_next_batch()
                total += published
                if handled == 0 and self.stats.refusals == refusals:
                    break
        finally:
            self._pipeline.draining = False
            if self._pipeline.progress is not None:
                self._pipeline.progress.flush()
        self._webhooks.run_once()  # and to the webhooks, each endpoint tried once
        return total

    def _wait_for_buckets(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self._member.owned()) < count and time.monotonic() < deadline:
            if self._member.error is not None:
                raise self._member.error
            # woken by the membership thread's first read of what it owns
            if self._member.wait_changed(0.02):
                self._member.changed()  # taken in by the sync below
        self._sync_ownership(force=True)

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> RelayStats:
        """Publish until :meth:`stop`; reconnect with back-off after failures.

        Raises:
            BrokerCredentialsError: the broker refused the login (not retried).
        """
        self._join()
        waiter = outbox_waiter(self._settings.database_url)
        backoff = Backoff(self._config.backoff_initial, self._config.backoff_max)
        try:
            while not self.stopping:
                for failed in (self._member.error, self._timed.error, self._webhooks.error):
                    if failed is not None:
                        raise failed
                try:
                    handled, _ = self._publish_next_batch()
                except BrokerCredentialsError:
                    raise  # a wrong user or password: retrying cannot help
                except BrokerError as exc:
                    self.stats.failures += 1
                    self._sender.close()
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
                if handled == 0:
                    self._idle(waiter)
        finally:
            waiter.close()
            self._leave()
        return self.stats

    def _idle(self, waiter: OutboxWaiter) -> None:
        # Wake for new events, a change of ownership, a blocked topic's retry or a stop.
        wait = self._config.idle_wait
        soonest = self._pipeline.next_retry()
        if soonest is not None:
            wait = min(wait, max(0.01, soonest - time.monotonic()))
        if isinstance(waiter, PostgresNotifyWaiter):
            # Events behind an open transaction's ids wait for it; if it rolls back, no
            # NOTIFY comes: look again soon rather than after idle_wait. Once more after
            # it has gone too: it may have rolled back between the read it held back and
            # this check.
            in_flight = self._ids_in_flight()
            if in_flight or self._was_in_flight:
                wait = min(wait, IN_FLIGHT_POLL)
            self._was_in_flight = in_flight
        deadline = time.monotonic() + wait
        while not self.stopping and not self._member.changed_pending():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            # Short slices so that stop() and ownership changes are honoured promptly.
            if waiter.wait(min(remaining, 0.05)):
                return

    def _ids_in_flight(self) -> bool:
        try:
            return self._catalog.group.ids_in_flight()
        except HcatNotifyError as exc:  # the next read reports database trouble
            logger.debug("relay could not check for open writers: %s", exc)
            return False

    # -- ownership ----------------------------------------------------------------------

    def _lost(self, buckets: Mapping[int, int]) -> None:
        self.stats.buckets_lost += len(buckets)
        self._member.lose(buckets)

    def _sync_ownership(self, *, force: bool = False) -> None:
        if self._member.changed() or force:
            self._pipeline.own(self._member.owned())

    def _on_blocked(self, topic: str, first_event: int | None) -> None:
        """The pipeline blocked ``topic`` (from ``first_event``) or unblocked it (None)."""
        if first_event is None:
            self.stats.blocked_topics.pop(topic, None)
        else:
            self.stats.blocked_topics[topic] = self.stats.refused.get(first_event, "refused")

    # -- publishing ---------------------------------------------------------------------

    def _publish_next_batch(self) -> tuple[int, int]:
        """One batch through the pipeline's steps: (events handled, events published)."""
        if time.monotonic() - self._member.refreshed_at > 2 * self._config.heartbeat_interval:
            # The membership thread has not read our buckets lately (this process was
            # paused, or the database slow): read them before sending anything more.
            self._member.refresh()
        self._sync_ownership()
        pipeline = self._pipeline
        if not pipeline.owned:
            return 0, 0
        batch = pipeline.read()
        if not batch.events:
            return 0, 0
        self._webhooks.wake()  # new events: the webhook pass looks at once, not at its interval
        started = time.monotonic()
        result = self._send(batch) if batch.fresh else None
        sent = pipeline.record(
            batch, result, idle_step=IDLE_RECORD_BATCHES * self._config.batch_size
        )
        self.stats.connects = self._sender.connects
        if sent:
            now_utc = datetime.now(UTC)
            broker = str(self._sender.address)
            if broker != self.stats.broker:
                self.stats.broker, self.stats.broker_since = broker, now_utc
            self.stats.published += len(sent)
            self.stats.batches += 1
            self.stats.last_publish_at = now_utc
            logger.info(
                "relay batch published=%d first=%d last=%d ms=%.1f",
                len(sent),
                sent[0].event_id,
                sent[-1].event_id,
                (time.monotonic() - started) * 1000,
            )
        return len(batch.events), len(sent)

    def _send(self, batch: Batch) -> SendResult:
        """Write the batch; commit it if it may be (else withdraw it); while the sink
        stores a full batch, read and write the next one ahead; settle."""
        pipeline = self._pipeline
        if pipeline.write(batch) and not pipeline.committable(batch):
            return pipeline.withdraw(batch)
        if pipeline.commit(batch) and batch.full:
            pipeline.read_ahead(batch)
        return pipeline.settle(batch)

    def _refused(self, event: OutboxEvent, reason: str, topic_refused: bool) -> bool:
        """Count a refusal of ``event``; True once it is parked (then it holds nothing)."""
        self.stats.refused[event.event_id] = reason
        self.stats.refusals += 1
        parked = self._catalog.outbox.record_refusal(
            event.event_id, reason, limit=self._config.max_attempts, actor=self.member_id
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
                "relay event refused event=%d topic=%s topic_refused=%s error=%r",
                event.event_id,
                event.topic,
                topic_refused,
                reason,
            )
        return parked

    # -- what the member reports --------------------------------------------------------

    def _report(self) -> MemberReport:
        loads = self._pipeline.loads()
        owned = self._member.owned()
        backlog, oldest = 0, None
        if owned:
            try:
                backlog, oldest = self._catalog.outbox.backlog_in_buckets(
                    list(owned), after_event_id=self._pipeline.cursor
                )
            except HcatNotifyError as exc:
                logger.debug("relay could not count its backlog: %s", exc)
        return MemberReport(
            member_id=self.member_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            events_per_second=sum(loads.values()),
            backlog=backlog,
            topics=self._pipeline.topics_in(owned),
            # every bucket it published in the window, owned or not: a bucket that moved
            # keeps its load in the controller's view (it sums the reports)
            bucket_loads=loads,
            oldest_unpublished_age=(
                None if oldest is None else (datetime.now(UTC) - oldest).total_seconds()
            ),
        )
