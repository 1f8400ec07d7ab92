"""The outbox's retention: which old events nobody needs any more, their deletion in
short batches, and the marks that turn a read of deleted history into an error.

What may go and what holds an event back is docs/operations.md, "The outbox's
retention"; the loop that paces the batches is :mod:`hcat_notify.store.sweep`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import aliased

from hcat_notify.errors import HistoryGoneError
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.events import EVENT_TYPES, EventType
from hcat_notify.model.webhooks import TablePatterns
from hcat_notify.store.models import (
    OutboxPrunedRow,
    OutboxRow,
    RetentionRow,
    SubscriberRow,
    SubscriberTableRow,
    SubscriberTopicRow,
    SubscriberWatermarkRow,
    TableRow,
    TopicProgressRow,
    WebhookProgressRow,
    WebhookRow,
)
from hcat_notify.store.pruned_marks import (
    ALL_TOPICS,
    chunks,
    lock_marks,
    move_marks,
    read_claims,
    topic_marks,
)
from hcat_notify.store.subscriptions import FLOOR_KEY
from hcat_notify.store.tx import Tx

__all__ = [
    "ALL_TOPICS",
    "HELD_DROP",
    "HELD_FOREVER",
    "HELD_RETAINED",
    "HELD_UNPUBLISHED",
    "HELD_YOUNG",
    "OutboxRetention",
    "OutboxSweep",
    "PruneBatch",
    "check_complete",
    "check_replay_from",
    "delete_judged",
    "holder_kind",
    "judge_batch",
    "pruned_through",
    "record_sweep",
    "retention_status",
]

HELD_UNPUBLISHED = "unpublished"
"""Not published yet, or parked (and not dropped)."""
HELD_RETAINED = "retained done"
"""A retained mark-set-done: a late subscriber's catch-up reads it from the outbox."""
HELD_DROP = "table drop"
"""A DROP_TABLE: what tells a dropped table from one never registered, and where a
re-created table's life starts."""
HELD_YOUNG = "younger than the retention"
HELD_FOREVER = "outbox_retention is forever"
_WEBHOOK = "webhook "
_SUBSCRIBER = "subscriber "
_DROP_TABLE = EventType.DROP_TABLE.value


def holder_kind(holder: str) -> str:
    """The kind of a holder as the sweep reports it: ``unpublished``, ``webhook``,
    ``subscriber``, ``retained done``, ``table drop``."""
    for prefix in (_WEBHOOK, _SUBSCRIBER):
        if holder.startswith(prefix):
            return prefix.strip()
    return holder


@dataclass(frozen=True)
class _Candidate:
    event_id: int
    topic: str
    table: str
    kind: EventType | None
    created_at: datetime
    parked: bool
    dropped: bool


@dataclass(frozen=True)
class _Hook:
    id: int
    name: str
    tables: TablePatterns
    events: frozenset[str] | None
    start_after: int

    def wants(self, event: _Candidate) -> bool:
        return (
            event.event_id > self.start_after
            and (self.events is None or (event.kind is not None and event.kind in self.events))
            and self.tables.matches(event.table)
        )


@dataclass
class PruneBatch:
    """What one batch of the outbox's sweep did."""

    walked_to: int | None
    """The highest event id it looked at (None: it found no event after its position)."""
    old: int = 0
    """Events it found older than the retention."""
    deleted: int = 0
    held: Counter[str] = field(default_factory=Counter)
    """Events held back, by holder (one event counts for each of its holders)."""
    kept: int = 0
    """Old events held back (each once)."""
    going: list[tuple[int, str]] = field(default_factory=list)
    """The (event id, topic) of the old events nobody holds back."""
    stamp: _Stamp = ()
    """The webhooks' and subscribers' stamp they were judged with (:func:`delete_judged`
    checks it)."""


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def pruned_through(tx: Tx) -> int:
    """The highest event id the sweep deleted (0: none): every topic's history is
    complete after it."""
    found = (
        tx.connection()
        .execute(select(OutboxPrunedRow.pruned_through).where(OutboxPrunedRow.topic == ALL_TOPICS))
        .scalar_one_or_none()
    )
    return int(found or 0)


def check_complete(tx: Tx, positions: Mapping[str, int], cursor: Cursor | None = None) -> None:
    """Raise if events of a topic after its position in ``positions`` were deleted.

    Raises:
        HistoryGoneError: naming the topic and, with ``cursor``, the oldest cursor from
            which the reader's history is complete.
    """
    marks = topic_marks(tx, positions)
    gone = {topic: mark for topic, mark in marks.items() if mark > positions[topic]}
    if not gone:
        return
    topic = min(gone)
    oldest = gone[topic]
    where = f"after event {positions[topic]}" if positions[topic] else "from its start"
    message = (
        f"the history of topic {topic} {where} is gone: the outbox's retention deleted "
        f"its events up to {oldest}"
    )
    if cursor is not None:
        moved = cursor
        for name, mark in sorted(gone.items()):
            moved = moved.advanced(name, mark)
        message += f"; the oldest complete cursor is {moved}"
    raise HistoryGoneError(
        message + " (or read without a cursor: the retained dones)", oldest=oldest
    )


def check_replay_from(tx: Tx, from_event: int) -> None:
    """Refuse a webhook's start at ``from_event`` when the sweep deleted events after it
    (the mark's row locked until the replay commits, so that no batch deletes them
    meanwhile).

    Raises:
        HistoryGoneError: naming the oldest event from which every topic is complete.
    """
    mark = lock_marks(tx, share=True).pruned_through
    if from_event <= mark:
        raise HistoryGoneError(
            f"event {from_event} is gone: the outbox's retention deleted events up to "
            f"{mark}; the oldest event to deliver from is {mark + 1}",
            oldest=mark + 1,
        )


def _candidates(tx: Tx, after: int, limit: int) -> list[_Candidate]:
    query = (
        select(
            OutboxRow.event_id,
            OutboxRow.topic,
            OutboxRow.table_name,
            OutboxRow.event_type,
            OutboxRow.created_at,
            OutboxRow.parked_at,
            OutboxRow.dropped_at,
        )
        .where(OutboxRow.event_id > after)
        .order_by(OutboxRow.event_id)
        .limit(limit)
    )
    return [
        _Candidate(
            event_id=row.event_id,
            topic=row.topic,
            table=row.table_name,
            kind=EVENT_TYPES.get(row.event_type),
            created_at=_aware(row.created_at),
            parked=row.parked_at is not None,
            dropped=row.dropped_at is not None,
        )
        for row in tx.connection().execute(query)
    ]


_Stamp = tuple[tuple[Any, ...], ...]


def _hooks(tx: Tx) -> tuple[list[_Hook], _Stamp]:
    """The webhooks that still want events: every one stored (paused and disabled ones
    deliver when they are resumed; removing one lets its events go). And the stamp of
    every webhook's row: whatever can make a webhook want an event again (a replay, an
    add) changes it."""
    rows = list(
        tx.connection().execute(
            select(
                WebhookRow.id,
                WebhookRow.name,
                WebhookRow.tables,
                WebhookRow.events,
                WebhookRow.start_after,
                WebhookRow.version,
                WebhookRow.state,
            ).order_by(WebhookRow.id)
        )
    )
    hooks = [
        _Hook(
            id=row.id,
            name=row.name,
            tables=TablePatterns(tuple(row.tables)),
            events=None if row.events is None else frozenset(row.events),
            start_after=row.start_after,
        )
        for row in rows
    ]
    return hooks, tuple((row.id, row.version, row.state, row.start_after) for row in rows)


def _holders(
    tx: Tx, events: Sequence[_Candidate], now: datetime, hooks: Sequence[_Hook]
) -> dict[int, list[str]]:
    """Who holds each of ``events`` back at ``now`` (an empty list: nobody; it may go)."""
    topics = sorted({event.topic for event in events})
    connection = tx.connection()
    published: dict[str, int] = {}
    lanes: dict[tuple[int, str], int] = {}
    marks: dict[str, dict[str, int]] = {}
    # A durable subscriber holds the topics and the tables it follows (stored at its
    # claim), and the topic each of those tables has now (re-created under another one
    # since: its catch-up reads that topic); one claimed by a version before 0022, or by
    # an older library since its claim stored them (stale), every topic, until it next
    # starts.
    everything = set(
        connection.execute(
            select(SubscriberRow.name).where(
                SubscriberRow.followed.is_(None)
                | SubscriberRow.followed_version.is_(None)
                | (SubscriberRow.followed_version != SubscriberRow.version)
            )
        ).scalars()
    )
    followers: dict[str, set[str]] = {topic: set(everything) for topic in topics}
    for chunk in chunks(topics):
        for subscriber, topic in connection.execute(
            select(SubscriberTableRow.subscriber, TableRow.topic)
            .join(
                TableRow,
                SubscriberTableRow.table_name == TableRow.db_name + "." + TableRow.table_name,
            )
            .where(TableRow.topic.in_(chunk))
        ):
            followers[topic].add(subscriber)
    tables = sorted({event.table for event in events})
    readers: dict[str, set[str]] = {table: set() for table in tables}
    for chunk in chunks(tables):
        for subscriber, table in connection.execute(
            select(SubscriberTableRow.subscriber, SubscriberTableRow.table_name).where(
                SubscriberTableRow.table_name.in_(chunk)
            )
        ):
            readers[table].add(subscriber)
    for chunk in chunks([*topics, FLOOR_KEY]):
        for row in connection.execute(
            select(
                SubscriberWatermarkRow.subscriber,
                SubscriberWatermarkRow.topic,
                SubscriberWatermarkRow.last_event_id,
            ).where(SubscriberWatermarkRow.topic.in_(chunk))
        ):
            marks.setdefault(row.subscriber, {})[row.topic] = row.last_event_id
    for name in _without_floor(tx):
        # Stored by an earlier version (watermarks, no floor): its next start resumes
        # by its watermarks, every topic without one from its start.
        marks.setdefault(name, {})[FLOOR_KEY] = 0
    for chunk in chunks(topics):
        for subscriber, topic in connection.execute(
            select(SubscriberTopicRow.subscriber, SubscriberTopicRow.topic).where(
                SubscriberTopicRow.topic.in_(chunk)
            )
        ):
            followers[topic].add(subscriber)
        published.update(
            (row.topic, row.last_event_id)
            for row in connection.execute(
                select(TopicProgressRow.topic, TopicProgressRow.last_event_id).where(
                    TopicProgressRow.topic.in_(chunk)
                )
            )
        )
        if hooks:
            lanes.update(
                ((row.webhook_id, row.topic), row.last_event_id)
                for row in connection.execute(
                    select(
                        WebhookProgressRow.webhook_id,
                        WebhookProgressRow.topic,
                        WebhookProgressRow.last_event_id,
                    ).where(
                        WebhookProgressRow.webhook_id.in_([hook.id for hook in hooks]),
                        WebhookProgressRow.topic.in_(chunk),
                    )
                )
            )
    retained = set(
        connection.execute(
            select(RetentionRow.event_id).where(
                RetentionRow.event_id.between(events[0].event_id, events[-1].event_id),
                RetentionRow.expires_at > now,
            )
        ).scalars()
    )
    # Per topic and table, the position on the topic of each subscriber that follows
    # either, lowest first: its own watermark of the topic, else its floor; an event is
    # held by those below it.
    positions: dict[tuple[str, str], list[tuple[int, str]]] = {
        (topic, table): sorted(
            (mark, name)
            for name in followers[topic] | readers[table]
            if (mark := _position(marks.get(name, {}), topic)) is not None
        )
        for topic, table in {(event.topic, event.table) for event in events}
    }
    found: dict[int, list[str]] = {}
    for event in events:
        holders: list[str] = []
        if not event.dropped and (event.parked or published.get(event.topic, 0) < event.event_id):
            holders.append(HELD_UNPUBLISHED)
        if event.event_id in retained:
            holders.append(HELD_RETAINED)
        if event.kind is EventType.DROP_TABLE:
            holders.append(HELD_DROP)
        if not event.parked:  # a webhook is never sent a parked event (nor a dropped one)
            for hook in hooks:
                if hook.wants(event):
                    position = lanes.get((hook.id, event.topic), hook.start_after)
                    if position < event.event_id:
                        holders.append(_WEBHOOK + hook.name)
        for mark, name in positions[event.topic, event.table]:
            if mark >= event.event_id:
                break
            holders.append(_SUBSCRIBER + name)
        found[event.event_id] = holders
    return found


def _position(watermarks: Mapping[str, int], topic: str) -> int | None:
    """Where a subscriber would resume ``topic``: its watermark, else its floor (None:
    no past; it holds nothing yet)."""
    return watermarks.get(topic, watermarks.get(FLOOR_KEY))


def _without_floor(tx: Tx) -> list[str]:
    """The durable subscribers with watermarks and no floor (one lookup of the primary
    key each: subscribers are few)."""
    mark = SubscriberWatermarkRow
    other = aliased(SubscriberWatermarkRow)
    floors = select(other.subscriber).where(
        other.subscriber == SubscriberRow.name, other.topic == FLOOR_KEY
    )
    any_mark = select(mark.subscriber).where(mark.subscriber == SubscriberRow.name)
    query = select(SubscriberRow.name).where(any_mark.exists(), ~floors.exists())
    return list(tx.connection().execute(query).scalars())


def judge_batch(
    tx: Tx, *, after: int, limit: int, now: datetime, retention: timedelta
) -> PruneBatch:
    """Judge the next ``limit`` events after ``after`` in id order (reads only): which of
    those created before ``now - retention`` nobody holds back at ``now``
    (:attr:`PruneBatch.going`), and who holds the others."""
    events = _candidates(tx, after, limit)
    if not events:
        return PruneBatch(walked_to=None)
    # A retention longer than the calendar reaches back keeps everything.
    cutoff = now - min(retention, now - datetime.min.replace(tzinfo=UTC))
    old = [event for event in events if event.created_at < cutoff]
    if not old:
        return PruneBatch(walked_to=events[-1].event_id)
    claims = read_claims(tx)  # before the followed topics are read
    hooks, stamp = _hooks(tx)
    stamp = (*stamp, (claims,))
    holders = _holders(tx, old, now, hooks)
    judged = PruneBatch(walked_to=events[-1].event_id, old=len(old), stamp=stamp)
    for event in old:
        judged.held.update(holders[event.event_id])
        if not holders[event.event_id]:
            judged.going.append((event.event_id, event.topic))
    judged.kept = len(old) - len(judged.going)
    return judged


def delete_judged(tx: Tx, judged: PruneBatch) -> bool:
    """Delete what :func:`judge_batch` found may go, in ``tx`` (a write transaction, short:
    the judging took no lock), and move the marks; False, deleting nothing, when a
    webhook or a durable subscriber's claim changed since (judge again).

    Only a webhook or a subscriber can want an event again once it did not (a replay, an
    add from an event, a claim that follows a topic anew: each changes the stamp);
    progress, lanes and watermarks only move forward, and a retained done never comes
    back. The batch locks the row of the highest mark first (PostgreSQL), as a replay's
    check and a claim do.
    """
    claims = lock_marks(tx, share=False).claims
    if (*_hooks(tx)[1], (claims,)) != judged.stamp:
        return False
    if not judged.going:
        return True
    marks: dict[str, int] = {}
    for chunk in chunks([event_id for event_id, _ in judged.going]):
        # Not an event parked since its judging: on PostgreSQL each statement of the
        # judging read its own snapshot, so a relay that parked it and moved its topic's
        # progress past it in between made it look published.
        rows = tx.connection().execute(
            delete(OutboxRow)
            .where(
                OutboxRow.event_id.in_(chunk),
                OutboxRow.parked_at.is_(None) | OutboxRow.dropped_at.is_not(None),
            )
            .returning(OutboxRow.event_id, OutboxRow.topic)
        )
        for event_id, topic in rows:
            judged.deleted += 1
            marks[topic] = max(marks.get(topic, 0), event_id)
    missed = len(judged.going) - judged.deleted
    if missed:
        judged.kept += missed
        judged.held[HELD_UNPUBLISHED] += missed
    if marks:
        marks[ALL_TOPICS] = max(marks.values())
        move_marks(tx, marks)
    return True


def record_sweep(tx: Tx, held: Mapping[str, int]) -> None:
    """Keep what the sweep that just ended held back (``status`` shows it)."""
    lock_marks(tx, share=False)
    tx.session.execute(
        update(OutboxPrunedRow)
        .where(OutboxPrunedRow.topic == ALL_TOPICS)
        .values(swept_at=tx.clock(), held=dict(held))
    )


@dataclass(frozen=True)
class OutboxSweep:
    """What a sweep of the outbox did (``hcat-notify sweep``)."""

    deleted: int
    kept: int
    """Events older than the retention it held back."""
    held: Mapping[str, int]
    """Held events by holder (``webhook NAME``, ``subscriber NAME``, ``unpublished``,
    ``retained done``, ``table drop``); an event counts for each of its holders."""
    retention: timedelta | None
    """The retention it applied (None: ``forever``, nothing looked at)."""

    def by_kind(self) -> dict[str, int]:
        """:attr:`held` summed by kind of holder (:func:`holder_kind`)."""
        kinds: Counter[str] = Counter()
        for holder, count in self.held.items():
            kinds[holder_kind(holder)] += count
        return dict(kinds)


@dataclass(frozen=True)
class OutboxRetention:
    """The outbox's size and what holds it back (``status``)."""

    oldest_event_id: int | None
    oldest_created_at: datetime | None
    newest_event_id: int | None
    rows_estimate: int | None
    """PostgreSQL's estimate of the rows (its statistics); None on SQLite."""
    pruned_through: int
    oldest_held_by: tuple[str, ...]
    """Who holds the oldest event back (empty: nobody but, maybe, its age)."""
    swept_at: float | None
    last_sweep_held: Mapping[str, int]


def retention_status(tx: Tx, now: datetime, retention: timedelta | None) -> OutboxRetention:
    """The outbox's oldest and newest event, its size, and who holds it back: the
    holders of its oldest event, and the last sweep's (a few indexed reads)."""
    first, last = tx.session.execute(
        select(func.min(OutboxRow.event_id), func.max(OutboxRow.event_id))
    ).one()
    mark = tx.session.execute(
        select(OutboxPrunedRow).where(OutboxPrunedRow.topic == ALL_TOPICS)
    ).scalar_one_or_none()
    estimate: int | None = None
    if tx.dialect == "postgresql":
        found = tx.session.execute(
            text("SELECT reltuples FROM pg_class WHERE relname = 'hcat_outbox'")
        ).scalar_one_or_none()
        estimate = int(found) if found is not None and found >= 0 else None
    oldest: datetime | None = None
    held: tuple[str, ...] = ()
    if first is not None:
        (candidate,) = _candidates(tx, first - 1, 1)
        oldest = candidate.created_at
        hooks, _ = _hooks(tx)
        held = tuple(_holders(tx, [candidate], now, hooks)[candidate.event_id])
        if not held and retention is None:
            held = (HELD_FOREVER,)
        elif not held and retention is not None and oldest >= now - retention:
            held = (HELD_YOUNG,)
    previous: dict[str, Any] = dict(mark.held or {}) if mark is not None else {}
    return OutboxRetention(
        oldest_event_id=first,
        oldest_created_at=oldest,
        newest_event_id=last,
        rows_estimate=estimate,
        pruned_through=mark.pruned_through if mark is not None else 0,
        oldest_held_by=held,
        swept_at=mark.swept_at if mark is not None else None,
        last_sweep_held={str(key): int(value) for key, value in previous.items()},
    )
