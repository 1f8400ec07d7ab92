"""``catalog.outbox``: the events the relay publishes, and what operators do with the
ones the broker refused (a thin view over :mod:`hcat_notify.store.outbox`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime

from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store import outbox, progress
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.records import OutboxEvent, RefusedEvent, as_table_name, outbox_events
from hcat_notify.store.tx import Tx

__all__ = ["Outbox"]

logger = logging.getLogger(__name__)


class Outbox:
    """The outbox of one catalog (``catalog.outbox``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
        fast: the catalog's driver-level reads (a relay's page).
    """

    def __init__(
        self, transaction: Callable[..., AbstractContextManager[Tx]], fast: FastPath
    ) -> None:
        self._transaction = transaction
        self._fast = fast

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
