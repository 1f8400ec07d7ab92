"""What the relays published: each bucket's published-through position and each topic's
progress, written fenced by the bucket's owner and epoch (a member that lost a bucket
moves nothing), and what is published judged from them. The design is in
docs/relay-group.md.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Executable, Update, bindparam, case, func, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite

from hcat_notify.store.models import OutboxRow, RelayBucketRow, TopicProgressRow
from hcat_notify.store.tx import Tx, clock_sql

__all__ = [
    "POSITIONS_PER_STATEMENT",
    "BucketProgress",
    "is_published",
    "keep_bucket",
    "keep_bucket_params",
    "keep_bucket_statement",
    "last_publish_by_topic",
    "move_positions",
    "published_topic_count",
    "record_progress",
    "topic_progress",
    "unpublished_filter",
]


@dataclass(frozen=True)
class BucketProgress:
    """What a member published in one bucket since it last recorded progress."""

    epoch: int
    published_through: int
    topics: Mapping[str, int]


POSITIONS_PER_STATEMENT = 500
"""Buckets moved by one statement of :func:`move_positions` (two parameters each)."""


@functools.cache
def _upsert_statement(dialect_name: str) -> Executable:
    """The upsert of topic progress rows (executed with one parameter set per topic):
    never backwards, never from an older epoch than the one that wrote the row."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    row = TopicProgressRow
    statement = dialect.insert(row).values(updated_at=clock_sql(dialect_name))
    excluded = statement.excluded
    upsert: Executable = statement.on_conflict_do_update(
        index_elements=[row.topic],
        set_={
            "last_event_id": case(
                (excluded.last_event_id > row.last_event_id, excluded.last_event_id),
                else_=row.last_event_id,
            ),
            "epoch": excluded.epoch,
            "bucket": excluded.bucket,
            "updated_at": excluded.updated_at,
        },
        where=row.epoch <= excluded.epoch,
    )
    return upsert


def _upsert_progress(tx: Tx, bucket: int, epoch: int, topics: Mapping[str, int]) -> None:
    rows = [
        {"topic": topic, "bucket": bucket, "last_event_id": last, "epoch": epoch}
        for topic, last in topics.items()
    ]
    if rows:
        tx.session.connection().execute(_upsert_statement(tx.dialect), rows)


def move_positions(tx: Tx, member_id: str, positions: Mapping[int, BucketProgress]) -> None:
    """Move the published-through position of buckets that published nothing (never
    backwards), fenced by owner and epoch like :func:`record_progress`; a bucket owned by
    another member now is left as it is, and not reported.

    One statement per distinct position (usually one for all): in a transaction of its
    own, its row locks are taken in one scan, like a controller's assignment, so the two
    cannot deadlock.
    """
    by_position: dict[int, list[tuple[int, int]]] = {}
    for bucket, progress in sorted(positions.items()):
        by_position.setdefault(progress.published_through, []).append((bucket, progress.epoch))
    for through, owned in by_position.items():
        for start in range(0, len(owned), POSITIONS_PER_STATEMENT):
            tx.session.execute(
                update(RelayBucketRow)
                .where(
                    tuple_(RelayBucketRow.bucket, RelayBucketRow.epoch).in_(
                        owned[start : start + POSITIONS_PER_STATEMENT]
                    ),
                    RelayBucketRow.owner == member_id,
                    RelayBucketRow.published_through < through,
                )
                .values(published_through=through)
                .execution_options(synchronize_session=False)
            )


_KEEP_BUCKET = (
    update(RelayBucketRow)
    .where(
        RelayBucketRow.bucket == bindparam("keep_bucket"),
        RelayBucketRow.owner == bindparam("keep_owner"),
        RelayBucketRow.epoch == bindparam("keep_epoch"),
    )
    .values(
        published_through=case(
            (
                RelayBucketRow.published_through < bindparam("keep_through"),
                bindparam("keep_through"),
            ),
            else_=RelayBucketRow.published_through,
        )
    )
)
"""A bucket's position moved, only while the member owns it at the epoch (run on the
connection: the session's ORM bulk update costs more than the statement)."""


def keep_bucket_statement(dialect: str) -> Update:
    """The statement of :func:`keep_bucket` (parameters ``keep_bucket``, ``keep_owner``,
    ``keep_epoch``, ``keep_through``; the same for every dialect), for a write run on the
    driver."""
    return _KEEP_BUCKET


def keep_bucket_params(
    member_id: str, bucket: int, epoch: int, through: int = -1
) -> dict[str, Any]:
    """The parameters of :func:`keep_bucket_statement`: ``bucket`` kept while
    ``member_id`` owns it at ``epoch``, its position moved up to ``through`` (-1: not
    moved, the fence alone)."""
    return {
        "keep_bucket": bucket,
        "keep_owner": member_id,
        "keep_epoch": epoch,
        "keep_through": through,
    }


def keep_bucket(tx: Tx, member_id: str, bucket: int, epoch: int) -> bool:
    """The fence of a write for ``bucket``: whether ``member_id`` still owns it at
    ``epoch`` (the statement :func:`record_progress` starts with, moving nothing; on
    PostgreSQL it locks the row against a move until ``tx`` ends)."""
    kept = tx.session.connection().execute(
        _KEEP_BUCKET, keep_bucket_params(member_id, bucket, epoch)
    )
    return bool(kept.rowcount)


def record_progress(tx: Tx, member_id: str, updates: Mapping[int, BucketProgress]) -> set[int]:
    """Record what ``member_id`` published, bucket by bucket, fenced by epoch.

    For each bucket, the bucket row is updated only while this member owns it at the
    given epoch (a compare-and-set that, on PostgreSQL, also locks the row against a
    concurrent move until commit); only then are its topics' progress rows written.

    Returns:
        The buckets the member no longer owns: it must stop publishing them at once.
    """
    connection = tx.session.connection()
    lost: set[int] = set()
    for bucket, progress in sorted(updates.items()):
        kept = connection.execute(
            _KEEP_BUCKET,
            keep_bucket_params(member_id, bucket, progress.epoch, progress.published_through),
        )
        if kept.rowcount == 0:
            lost.add(bucket)
            continue
        _upsert_progress(tx, bucket, progress.epoch, progress.topics)
    return lost


def topic_progress(tx: Tx, in_buckets: Iterable[int] | None = None) -> dict[str, int]:
    """Highest published event id per topic (of some buckets, or all)."""
    query = select(TopicProgressRow.topic, TopicProgressRow.last_event_id)
    if in_buckets is not None:
        query = query.where(TopicProgressRow.bucket.in_(list(in_buckets)))
    return {row.topic: row.last_event_id for row in tx.session.execute(query)}


def progress_of_topics(tx: Tx, topics: Iterable[str]) -> dict[str, int]:
    """Highest published event id of each of ``topics`` that has a progress row (one
    indexed lookup per 500 topics)."""
    wanted = sorted(set(topics))
    found: dict[str, int] = {}
    for start in range(0, len(wanted), 500):
        query = select(TopicProgressRow.topic, TopicProgressRow.last_event_id).where(
            TopicProgressRow.topic.in_(wanted[start : start + 500])
        )
        found.update({row.topic: row.last_event_id for row in tx.session.execute(query)})
    return found


def last_publish_by_topic(tx: Tx, limit: int | None = None) -> dict[str, float]:
    """When each topic's progress last moved (DB clock, seconds since the epoch), the
    latest first; with ``limit`` only the topics published last (``updated_at``'s index
    read backwards: as cheap with a million topics as with ten)."""
    query = select(TopicProgressRow.topic, TopicProgressRow.updated_at).order_by(
        TopicProgressRow.updated_at.desc()
    )
    rows = tx.session.execute(query if limit is None else query.limit(limit))
    return {row.topic: row.updated_at for row in rows}


def published_topic_count(tx: Tx) -> int:
    """How many topics have a progress row (were ever published)."""
    return int(tx.session.execute(select(func.count()).select_from(TopicProgressRow)).scalar_one())


def is_published(tx: Tx, row: OutboxRow) -> bool:
    """Whether the event of ``row`` was published (its topic's progress reached it)."""
    if row.parked_at is not None:
        return False
    last = tx.session.execute(
        select(TopicProgressRow.last_event_id).where(TopicProgressRow.topic == row.topic)
    ).scalar_one_or_none()
    return last is not None and row.event_id <= last


def unpublished_filter() -> Any:
    """Outbox rows whose topic's progress has not reached them (a WHERE clause)."""
    progress = (
        select(TopicProgressRow.last_event_id)
        .where(TopicProgressRow.topic == OutboxRow.topic)
        .scalar_subquery()
    )
    return OutboxRow.event_id > func.coalesce(progress, 0)
