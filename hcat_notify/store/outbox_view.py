"""``catalog.outbox``: the events the relay publishes, and what operators do with the
ones the broker refused (a thin view over :mod:`hcat_notify.store.outbox`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store import outbox, outbox_retention, progress, sweep
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.outbox_retention import OutboxRetention, OutboxSweep
from hcat_notify.store.records import OutboxEvent, RefusedEvent, as_table_name, outbox_events
from hcat_notify.store.tx import Tx

__all__ = ["Outbox"]

logger = logging.getLogger(__name__)


class Outbox:
    """The outbox of one catalog (``catalog.outbox``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
        fast: the catalog's driver-level reads (a relay's page).
        clock: the catalog's clock.
        checkpoint: on SQLite, checkpoints the catalog's log between two batches of a
            sweep; None on PostgreSQL.
    """

    def __init__(
        self,
        transaction: Callable[..., AbstractContextManager[Tx]],
        fast: FastPath,
        clock: Callable[[], datetime] | None = None,
        checkpoint: Callable[[], None] | None = None,
    ) -> None:
        self._transaction = transaction
        self._fast = fast
        self._clock = clock if clock is not None else (lambda: datetime.now(UTC))
        self._checkpoint = checkpoint

    def pending(
        self,
        *,
        after_event_id: int = 0,
        limit: int = 500,
        exclude_topics: Sequence[str] = (),
    ) -> list[OutboxEvent]:
        """Unpublished events in event-id order, at most ``limit`` of them.

        Args:
            after_event_id: only events after this id.
            limit: the most to return (bounds the relay's memory).
            exclude_topics: skip these topics (ones the broker currently refuses).
        """
        with self._transaction() as tx:
            return outbox.pending_events(
                tx, after_event_id=after_event_id, limit=limit, exclude_topics=exclude_topics
            )

    def events(self, *, after_event_id: int = 0, limit: int = 500) -> list[OutboxEvent]:
        """All outbox events (published or not) after an event id, in order."""
        with self._transaction() as tx:
            return outbox.events(tx, after_event_id=after_event_id, limit=limit)

    def backlog_in_buckets(
        self, in_buckets: Sequence[int], *, after_event_id: int
    ) -> tuple[int, datetime | None]:
        """Events of some buckets after an id, not parked: how many, the oldest's time."""
        with self._transaction() as tx:
            return outbox.backlog_in_buckets(tx, in_buckets, after_event_id=after_event_id)

    def events_in_buckets(
        self, in_buckets: Sequence[int], *, after_event_id: int, limit: int
    ) -> list[OutboxEvent]:
        """Events of the given buckets after an id, not parked, in id order (a relay's
        page; it skips what its topics' progress says is published), read on the driver
        (docs/architecture.md, "Hot paths")."""
        if not in_buckets:
            return []
        return outbox_events(self._fast.outbox_page(in_buckets, after=after_event_id, limit=limit))

    def last_event_id(self) -> int:
        """The highest event id at or below which every event is committed or rolled back
        (0 for a new catalog): on SQLite the last one handed out; on PostgreSQL it stays
        below the ids of transactions still open."""
        with self._transaction() as tx:
            return tx.last_event_id()

    def backlog(self) -> tuple[int, datetime | None]:
        """(number of unpublished events, creation time of the oldest)."""
        with self._transaction() as tx:
            return outbox.outbox_backlog(tx)

    def last_published_by_topic(self, limit: int | None = None) -> dict[str, datetime]:
        """The time of the latest publish per topic, the latest first; with ``limit``
        only the topics published last."""
        with self._transaction() as tx:
            return outbox.last_published_by_topic(tx, limit)

    def published_topics(self) -> int:
        """How many topics were ever published."""
        with self._transaction() as tx:
            return progress.published_topic_count(tx)

    def parked_count(self) -> int:
        """Events parked as undeliverable (not dropped)."""
        with self._transaction() as tx:
            return outbox.parked_count(tx)

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> Sequence[OutboxEvent]:
        """What a subscriber that starts now may have missed, as the events that said it.

        Without a cursor (a consumer with no past): the unexpired MARK_SET_DONE messages
        of the tables. With one: every event of the tables after the watermark of its
        topic (see :class:`~hcat_notify.model.cursor.Cursor`), in event-id order, of
        every kind. Page through a large catch-up with ``page_after`` (the last event id
        of the previous page) and ``limit``.

        Only a table's present life counts: a table re-created under the name of a
        dropped one is caught up from after that one's DROP_TABLE, whatever the cursor.
        A dropped table (with a cursor) is caught up through its DROP_TABLE, so that a
        consumer that was away learns of the drop; without a cursor it has nothing.

        Raises:
            TableNotFoundError: a table was never registered.
            InvalidInputError: the cursor does not parse.
            HistoryGoneError: the outbox's retention deleted events after the cursor's
                position of a topic (its message names the oldest complete cursor).
        """
        names = [as_table_name(table) for table in tables]
        parsed = cursor if isinstance(cursor, Cursor) else Cursor.parse(cursor)
        with self._transaction() as tx:
            return outbox.catch_up(
                tx,
                [outbox.catch_up_scope(tx, name) for name in names],
                cursor=parsed if parsed else None,
                page_after=page_after,
                limit=limit,
            )

    def pruned_through(self) -> int:
        """The highest event id the outbox's retention deleted (0: none): every topic's
        history is complete after it."""
        with self._transaction() as tx:
            return outbox_retention.pruned_through(tx)

    def _now(self) -> datetime:
        """The earlier of the database's clock and the catalog's: a host whose clock runs
        ahead deletes nothing early."""
        with self._transaction() as tx:
            database = datetime.fromtimestamp(tx.clock(), UTC)
        return min(database, self._clock())

    def sweep(
        self,
        retention: timedelta | None,
        *,
        batch_size: int = 1000,
        max_duty: float | None = None,
        max_batches: int | None = None,
        progress: Callable[[int], None] | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> OutboxSweep:
        """Delete the events older than ``retention`` that nobody holds back, walking the
        outbox in event-id order in batches of at most ``batch_size`` events, one write
        transaction each, sized and paced as the dones' sweep
        (:func:`hcat_notify.store.sweep.run_paced`); a held event is skipped, never a
        stop. ``retention`` None (``forever``) deletes nothing.

        Raises:
            InvalidInputError: ``batch_size`` is below 1, or ``max_duty`` out of range.
        """
        if retention is None:
            return OutboxSweep(deleted=0, kept=0, held={}, retention=None)
        held: Counter[str] = Counter()
        walked = {"after": 0, "kept": 0}

        def batch(asked: int, now: datetime) -> tuple[int, float, bool]:
            with self._transaction() as tx:  # judged without a lock
                judged = outbox_retention.judge_batch(
                    tx, after=walked["after"], limit=asked, now=now, retention=retention
                )
            if judged.walked_to is None or judged.old == 0:
                return 0, 0.0, False  # the end, or only young events left
            locked = timer()
            if judged.going:
                with self._transaction(write=True) as tx:
                    if not outbox_retention.delete_judged(tx, judged):
                        return 0, timer() - locked, True  # a webhook changed: judge again
            held.update(judged.held)
            walked["kept"] += judged.kept
            walked["after"] = judged.walked_to
            return judged.deleted, timer() - locked, True

        deleted, batches = sweep.run_paced(
            batch,
            self._now,
            self._checkpoint,
            batch_size=batch_size,
            max_duty=sweep.SWEEP_MAX_DUTY if max_duty is None else max_duty,
            max_batches=max_batches,
            progress=progress,
            timer=timer,
        )
        with self._transaction(write=True) as tx:
            outbox_retention.record_sweep(tx, held)
        logger.info(
            "outbox sweep: %d events deleted in %d batches, %d held back",
            deleted,
            batches,
            walked["kept"],
        )
        return OutboxSweep(
            deleted=deleted, kept=walked["kept"], held=dict(held), retention=retention
        )

    def retention(self, retention: timedelta | None) -> OutboxRetention:
        """The outbox's oldest and newest events, its size, and who holds it back
        (``status``), judged by ``retention``."""
        now = self._now()
        with self._transaction() as tx:
            return outbox_retention.retention_status(tx, now, retention)

    def record_refusal(self, event_id: int, reason: str, *, limit: int, actor: str) -> bool:
        """Count one refusal of an event by the broker; park it at the ``limit``-th.

        Args:
            event_id: the refused event.
            reason: what the broker said (kept, shown by ``hcat-notify status``).
            limit: refusals after which the event is parked as undeliverable.
            actor: who parks it (the relay's member id), for the action log.

        Returns:
            True if the event is parked (now or before).
        """
        with self._transaction(write=True) as tx:
            return outbox.record_refusal(tx, event_id, reason, limit=limit, actor=actor)

    def refused(self) -> list[RefusedEvent]:
        """Unpublished events the broker refused for themselves, oldest first: parked
        ones (``parked_at`` set) and ones the relay still tries."""
        with self._transaction() as tx:
            return outbox.refused_events(tx)

    def retry_parked(self, event_ids: Sequence[int], *, actor: str) -> dict[int, int]:
        """Announce parked events again, each as a new event, in one transaction.

        Returns:
            Old event id -> new event id.

        Raises:
            InvalidInputError: an event is unknown, not parked, or already handled
                (then nothing is retried).
        """
        with self._transaction(write=True) as tx:
            renumbered = {
                event_id: outbox.retry_parked(tx, event_id, actor=actor) for event_id in event_ids
            }
        for old, new in renumbered.items():
            logger.info("outbox event %d retried as event %d by %s", old, new, actor)
        return renumbered

    def drop_parked(
        self, event_ids: Sequence[int], *, actor: str, reason: str | None = None
    ) -> None:
        """Give parked events up for good (they stay in the outbox, marked dropped).

        Raises:
            InvalidInputError: an event is unknown, not parked, or already handled
                (then nothing is dropped).
        """
        with self._transaction(write=True) as tx:
            for event_id in event_ids:
                outbox.drop_parked(tx, event_id, actor=actor, reason=reason)
        logger.info("outbox events %s dropped by %s: %s", list(event_ids), actor, reason or "")
