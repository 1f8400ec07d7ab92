"""The outbox: events written with the rows they announce, published by the relay."""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Executable,
    Integer,
    Select,
    String,
    Text,
    any_,
    bindparam,
    cast,
    func,
    insert,
    select,
    text,
    true,
    type_coerce,
    update,
)

from hcat_notify.errors import InvalidInputError, TableDroppedError
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.events import EVENT_TYPES
from hcat_notify.model.names import TableName
from hcat_notify.model.wire import Message, with_event_id
from hcat_notify.store import group, outbox_retention, progress
from hcat_notify.store.event_rows import outbox_row
from hcat_notify.store.group import unpublished_filter
from hcat_notify.store.models import (
    REFUSED_CONDITION,
    OutboxActionRow,
    OutboxRow,
    PartitionRow,
    RelayBucketRow,
    RetentionRow,
)
from hcat_notify.store.records import (
    OutboxEvent,
    OutboxPage,
    RefusedEvent,
    outbox_events,
)
from hcat_notify.store.tx import Tx

_PARKED = "parked_at IS NOT NULL AND dropped_at IS NULL"  # ix_hcat_outbox_parked

__all__ = [
    "SORT_OFF",
    "CatchUpScope",
    "add_outbox_rows",
    "backlog_in_buckets",
    "bucket_page_query",
    "catch_up",
    "catch_up_scope",
    "drop_parked",
    "events",
    "events_in_buckets",
    "last_published_by_topic",
    "outbox_backlog",
    "parked_count",
    "pending_events",
    "record_refusal",
    "refused_events",
    "retry_parked",
    "topic_events",
]

# Plain column selects for the hot paths (relay, catch-up), in the argument order of
# records.outbox_event, typed so that no result processor runs per row: the headers come
# as their stored JSON text (PostgreSQL's driver would decode a json column with
# json.loads) and the timestamp as the driver returns it; outbox_event decodes both.
_OUTBOX_COLUMNS = (
    OutboxRow.event_id,
    OutboxRow.topic,
    OutboxRow.event_type,
    OutboxRow.table_name,
    cast(OutboxRow.headers, Text),
    OutboxRow.body,
    type_coerce(OutboxRow.created_at, String),
    OutboxRow.bucket,
)


def _outbox_events(
    tx: Tx, query: Executable, params: dict[str, Any] | None = None
) -> list[OutboxEvent]:
    return outbox_events(_plain_rows(tx, query, params))


def _in_id_order(bound: int | None) -> ColumnElement[bool]:
    """The condition that bounds a read of events in id order (after a position) to
    ``bound``, :meth:`Tx.id_order_bound` (what no later commit can still add to); always
    true where there is none (SQLite)."""
    return true() if bound is None else OutboxRow.event_id <= bound


def _plain_rows(
    tx: Tx, query: Executable, params: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of a query of plain columns as the driver returns them (tuples).

    The columns need no result processing (text, integers, and a time read as text or
    as the driver's datetime); SQLAlchemy's row objects would cost a wrapper each.
    """
    result = tx.rows(query, params)
    try:
        return list(result.cursor.fetchall())  # type: ignore[attr-defined]
    finally:
        result.close()


def add_outbox_rows(tx: Tx, messages: Sequence[Message], table: TableName) -> None:
    """Write the outbox rows of built messages, each in the bucket of its topic, in one
    statement (a write of 1,000 partitions announces 1,000 events: no ORM object each)."""
    if messages:
        tx.session.execute(
            insert(OutboxRow),
            [
                outbox_row(message, table, tx.bucket_of(message.topic), tx.now)
                for message in messages
            ],
        )


def pending_events(
    tx: Tx, *, after_event_id: int = 0, limit: int = 500, exclude_topics: Sequence[str] = ()
) -> list[OutboxEvent]:
    """Events not published yet (nor parked), in event-id order, at most ``limit``."""
    query = (
        select(*_OUTBOX_COLUMNS)
        .where(
            OutboxRow.parked_at.is_(None),
            OutboxRow.event_id > after_event_id,
            unpublished_filter(),
        )
        .order_by(OutboxRow.event_id)
        .limit(limit)
    )
    if exclude_topics:
        query = query.where(OutboxRow.topic.not_in(list(exclude_topics)))
    return _outbox_events(tx, query.where(_in_id_order(tx.id_order_bound())))


def topic_events(
    tx: Tx, topic: str, *, after_event_id: int, through: int, limit: int
) -> list[OutboxEvent]:
    """Events of one topic after ``after_event_id`` up to ``through``, not parked, in id
    order (a webhook's next batch: ``through`` is where a page of its buckets ended)."""
    query = (
        select(*_OUTBOX_COLUMNS)
        .where(
            OutboxRow.topic == topic,
            OutboxRow.event_id > after_event_id,
            OutboxRow.event_id <= through,
            OutboxRow.parked_at.is_(None),
        )
        .order_by(OutboxRow.event_id)
        .limit(limit)
    )
    return _outbox_events(tx, query)


def events_in_buckets(
    tx: Tx, in_buckets: Sequence[int], *, after_event_id: int, limit: int
) -> list[OutboxEvent]:
    """Events of some buckets after ``after_event_id``, not parked, in id order.

    The relay's page: it skips what its topic progress says is published already. (The
    relay itself reads it on the driver: :meth:`FastPath.outbox_page`.)
    """
    if not in_buckets:
        return []
    postgres = tx.dialect == "postgresql"
    if postgres:
        tx.session.execute(text(SORT_OFF))
    params: dict[str, Any] = {"after": after_event_id, "limit": limit}
    params["owned"] = list(in_buckets)
    bound = tx.id_order_bound()
    if bound is not None:
        params["bound"] = bound
    query = bucket_page_query(tx.dialect, None)
    return _outbox_events(tx, query, params)


SORT_OFF = "SET LOCAL enable_sort = off"
"""PostgreSQL, before a relay's page: walk the primary key from the position and stop
after a page. Without statistics (an outbox filled faster than autovacuum analyzes it)
PostgreSQL guesses a handful of rows match and collects every row after the position to
sort them: work that grows with the backlog, for each page."""


def bucket_page_query(
    dialect: str, owned: int | None
) -> Select[int, str, str, str, str, str, str, int]:
    """A relay's page: the events of the owned buckets after ``after``, not parked, in
    id order, at most ``limit``; on PostgreSQL only up to ``bound``
    (:meth:`Tx.id_order_bound`).

    The owned buckets are one parameter ``owned`` (PostgreSQL: an array; SQLite with
    ``owned`` None: a list SQLAlchemy expands) or, for the driver on SQLite, ``owned``
    parameters ``b0``, ``b1``, ...: a statement built and cached once, where a literal
    list made SQLAlchemy coerce and key up to 256 values per page.
    """
    # "bucket + 0" keeps the planners off the (bucket, event_id) index: read in event-id
    # order from the position, filtering buckets on the way, instead of collecting every
    # pending row of the buckets and sorting them per page.
    bucket = OutboxRow.bucket + 0
    if dialect == "postgresql":
        in_owned = bucket == any_(bindparam("owned", type_=ARRAY(Integer)))
    elif owned is None:
        in_owned = bucket.in_(bindparam("owned", expanding=True))
    else:
        in_owned = bucket.in_([bindparam(f"b{index}", type_=Integer) for index in range(owned)])
    query = (
        select(*_OUTBOX_COLUMNS)
        .where(
            in_owned,
            OutboxRow.event_id > bindparam("after", type_=BigInteger),
            OutboxRow.parked_at.is_(None),
        )
        .order_by(OutboxRow.event_id)
        .limit(bindparam("limit", type_=Integer))
    )
    if dialect == "postgresql":
        query = query.where(OutboxRow.event_id <= bindparam("bound", type_=BigInteger))
    return query


def backlog_in_buckets(
    tx: Tx, in_buckets: Sequence[int], *, after_event_id: int
) -> tuple[int, datetime | None]:
    """(events of some buckets after an id, not parked; creation time of the oldest)."""
    if not in_buckets:
        return 0, None
    count, oldest = tx.session.execute(
        select(func.count(OutboxRow.event_id), func.min(OutboxRow.created_at)).where(
            OutboxRow.bucket.in_(list(in_buckets)),
            OutboxRow.event_id > after_event_id,
            OutboxRow.parked_at.is_(None),
        )
    ).one()
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    return int(count), oldest


def events(tx: Tx, *, after_event_id: int = 0, limit: int = 500) -> list[OutboxEvent]:
    """All outbox events (published or not) after an event id, in order."""
    query = select(*_OUTBOX_COLUMNS).where(OutboxRow.event_id > after_event_id)
    return _outbox_events(
        tx, query.where(_in_id_order(tx.id_order_bound())).order_by(OutboxRow.event_id).limit(limit)
    )


def outbox_backlog(tx: Tx) -> tuple[int, datetime | None]:
    """(number of events waiting to be published, creation time of the oldest).

    Parked events are not waiting: :func:`refused_events` lists them. Read bucket by
    bucket (a correlated count per bucket, each a range of ``ix_hcat_outbox_bucket_event``
    past what the bucket certainly published), so that the cost is the backlog's, not
    the outbox's: joined, the planners scan the whole outbox.
    """
    waiting = (
        OutboxRow.bucket == RelayBucketRow.bucket,
        # each bucket's range past what is certainly published, then per topic
        OutboxRow.event_id > RelayBucketRow.published_through,
        OutboxRow.parked_at.is_(None),
        unpublished_filter(),
    )
    count = (
        select(func.count(OutboxRow.event_id))
        .where(*waiting)
        .correlate(RelayBucketRow)
        .scalar_subquery()
    )
    first = (
        select(func.min(OutboxRow.created_at))
        .where(*waiting)
        .correlate(RelayBucketRow)
        .scalar_subquery()
    )
    rows = tx.session.execute(select(count, first).select_from(RelayBucketRow)).all()
    total = sum(int(row[0]) for row in rows)
    times = [row[1] for row in rows if row[1] is not None]
    oldest = min(times) if times else None
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    return total, oldest


def last_published_by_topic(tx: Tx, limit: int | None = None) -> dict[str, datetime]:
    """When each topic was last published (its progress moved), the latest first; with
    ``limit`` only the topics published last."""
    return {
        topic: datetime.fromtimestamp(when, UTC)
        for topic, when in progress.last_publish_by_topic(tx, limit).items()
    }


@dataclass(frozen=True)
class CatchUpScope:
    """Which of a topic's events belong to one table's present life.

    A table re-created under a dropped one's name shares its name (and usually its
    topic): its catch-up starts after the previous table's DROP_TABLE (``after``). A
    dropped table (``table_id`` None) is caught up through its own DROP_TABLE
    (``through``), so a consumer that was away learns of the drop.
    """

    name: TableName
    topic: str
    table_id: int | None
    after: int = 0
    through: int | None = None


def catch_up_scope(tx: Tx, name: TableName) -> CatchUpScope:
    """The catch-up scope of a registered table, or of the last dropped one of that name.

    Raises:
        TableNotFoundError: no table of that name was ever registered (or its drop is
            not in the outbox).
    """
    try:
        row = tx.table_row(name)
    except TableDroppedError:
        last, *earlier = tx.table_drops(name, limit=2)
        start = earlier[0].event_id if earlier else 0
        return CatchUpScope(name, last.topic, None, start, last.event_id)
    drops = tx.table_drops(name, limit=1)
    return CatchUpScope(name, row.topic, row.id, drops[0].event_id if drops else 0)


def catch_up(
    tx: Tx,
    scopes: Sequence[CatchUpScope],
    *,
    cursor: Cursor | None,
    page_after: int,
    limit: int | None,
) -> OutboxPage:
    """What a subscriber that starts now may have missed (see :meth:`Catalog.catch_up`).

    Without a cursor: the registered tables' unexpired retained dones. With one: every
    event of each table's present life (its scope) after its topic's watermark,
    whatever its kind (:class:`~hcat_notify.errors.HistoryGoneError` when the outbox's
    retention deleted some of them). Each source is an ordered index scan (a topic's
    events by id; the retained dones by table and id), merged by event id: a page costs
    the same however much precedes it.
    """
    queries = []
    positions: dict[str, int] = {}
    if cursor:
        _check_not_beyond(tx, cursor)
    if cursor is None or not cursor:
        table_ids = [scope.table_id for scope in scopes if scope.table_id is not None]
        if table_ids:
            queries.append(
                select(*_OUTBOX_COLUMNS)
                .join(RetentionRow, RetentionRow.event_id == OutboxRow.event_id)
                .where(
                    RetentionRow.table_id.in_(table_ids),
                    RetentionRow.expires_at > tx.now,
                    RetentionRow.event_id > page_after,
                    # The same bound on the outbox side: PostgreSQL's merge join would
                    # otherwise scan the outbox from its first id on every page.
                    OutboxRow.event_id > page_after,
                )
                .order_by(RetentionRow.event_id)
            )
    else:
        for scope in scopes:
            mark = cursor.get(scope.topic)
            after = max(page_after, mark if mark is not None else 0, scope.after)
            positions[scope.topic] = min(after, positions.get(scope.topic, after))
            query = select(*_OUTBOX_COLUMNS).where(
                OutboxRow.topic == scope.topic,
                OutboxRow.event_id > after,
                OutboxRow.table_name == str(scope.name),
            )
            if scope.through is not None:
                query = query.where(OutboxRow.event_id <= scope.through)
            queries.append(query.order_by(OutboxRow.event_id))
    bound = tx.id_order_bound()
    queries = [query.where(_in_id_order(bound)) for query in queries]
    if limit is not None:
        queries = [query.limit(limit) for query in queries]
    # The driver's own row tuples (the page builds each event when it is handed out).
    streams = [_plain_rows(tx, query) for query in queries]
    if cursor:
        # A position below what the outbox's retention deleted skipped events. Read after
        # the events: a sweep that deleted some of them before they were read (each
        # statement sees what was committed when it began, on PostgreSQL) moved the
        # marks in the same commit.
        outbox_retention.check_complete(tx, positions, cursor)
    if len(streams) == 1:  # one ordered, limited stream already
        return OutboxPage(streams[0])
    merged = heapq.merge(*streams, key=operator.itemgetter(0))  # by event id
    return OutboxPage(list(itertools.islice(merged, limit) if limit is not None else merged))


def _check_not_beyond(tx: Tx, cursor: Cursor) -> None:
    """Refuse a cursor with a position beyond the newest event: every read hands out
    positions at or below it, so such a cursor is mistyped or of another catalog, and
    following it would skip every event up to it without a word.

    Raises:
        InvalidInputError: naming the cursor and the newest event.
    """
    marks = [*cursor.watermarks.values(), *([cursor.default] if cursor.default else [])]
    newest = tx.last_event_id()
    if marks and max(marks) > newest:
        raise InvalidInputError(
            f"cursor {cursor} is beyond the newest event ({newest}): it names no event this "
            "catalog has written (read without a cursor, or with one a read handed out)"
        )


# -- undeliverable events -------------------------------------------------------------


def record_refusal(tx: Tx, event_id: int, reason: str, *, limit: int, actor: str) -> bool:
    """Count one refusal of ``event_id`` by the broker; park it at the ``limit``-th.

    Returns:
        True if the event is parked now (the relay no longer sends it).
    """
    row = tx.session.get(OutboxRow, event_id)
    if row is None or row.parked_at is not None or group.is_published(tx, row):
        return row is not None and row.parked_at is not None
    row.attempts += 1
    row.last_error = reason
    if row.attempts < limit:
        return False
    row.parked_at = tx.now
    tx.session.add(
        OutboxActionRow(event_id=event_id, action="parked", actor=actor, at=tx.now, reason=reason)
    )
    return True


def parked_count(tx: Tx) -> int:
    """Events parked as undeliverable and not dropped (a count of a partial index)."""
    query = select(func.count()).select_from(OutboxRow).where(text(_PARKED))
    return int(tx.session.execute(query).scalar_one())


def refused_events(tx: Tx) -> list[RefusedEvent]:
    """Unpublished events the broker refused: parked ones, and ones still being tried.

    Two reads of partial indexes of the rare refused rows (``ix_hcat_outbox_parked``,
    ``ix_hcat_outbox_refused``), never a scan of the outbox."""
    parked = tx.session.scalars(select(OutboxRow).where(text(_PARKED)))
    tried = tx.session.scalars(
        select(OutboxRow).where(text(REFUSED_CONDITION), unpublished_filter())
    )
    rows = sorted([*parked, *tried], key=operator.attrgetter("event_id"))
    return [
        RefusedEvent(
            event_id=row.event_id,
            topic=row.topic,
            table=row.table_name,
            event_type=EVENT_TYPES[row.event_type],
            reason=row.last_error or "",
            attempts=row.attempts,
            parked_at=row.parked_at,
        )
        for row in rows
    ]


def _parked_row(tx: Tx, event_id: int) -> OutboxRow:
    row = tx.session.get(OutboxRow, event_id)
    if row is None:
        raise InvalidInputError(f"event {event_id} is not in the outbox")
    if row.dropped_at is not None:
        raise InvalidInputError(f"event {event_id} was already retried or dropped")
    if row.parked_at is None:
        state = "published" if group.is_published(tx, row) else "waiting to be published"
        raise InvalidInputError(f"event {event_id} is not parked: it is {state}")
    return row


def retry_parked(tx: Tx, event_id: int, *, actor: str) -> int:
    """Announce a parked event again, as a new event; return the new event id.

    A new id (rather than the old one unparked) keeps ids increasing per topic on the
    wire: consumers that remember the highest id per topic would drop an old one. What
    pointed at the old event (its partition, its retained done) points at the new one.
    """
    row = _parked_row(tx, event_id)
    (new_id,) = tx.allocate_event_ids(1)
    headers, body = with_event_id(row.headers, row.body, new_id)
    tx.session.add(
        OutboxRow(
            event_id=new_id,
            topic=row.topic,
            bucket=row.bucket,
            event_type=row.event_type,
            table_name=row.table_name,
            headers=headers,
            body=body,
            created_at=tx.now,
        )
    )
    tx.session.flush()
    tx.session.execute(
        update(PartitionRow).where(PartitionRow.event_id == event_id).values(event_id=new_id)
    )
    tx.session.execute(
        update(RetentionRow).where(RetentionRow.event_id == event_id).values(event_id=new_id)
    )
    row.dropped_at = tx.now
    tx.session.add(
        OutboxActionRow(
            event_id=event_id, action="retried", actor=actor, at=tx.now, new_event_id=new_id
        )
    )
    return new_id


def drop_parked(tx: Tx, event_id: int, *, actor: str, reason: str | None) -> None:
    """Give up a parked event for good: it stays in the outbox, marked dropped."""
    row = _parked_row(tx, event_id)
    row.dropped_at = tx.now
    tx.session.add(
        OutboxActionRow(event_id=event_id, action="dropped", actor=actor, at=tx.now, reason=reason)
    )
