"""Durable subscribers (Hedwig's subscription data): who consumes under a name, and the
highest event id it handled per topic.

One process at a time owns a name. It claims it (refused while another owner is alive,
unless taking over), heartbeats while it runs, and moves its watermarks after each
handled notification; a write by an owner that was taken over changes nothing. Ages are
judged by the database's clock.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import cast

from sqlalchemy import (
    BigInteger,
    String,
    case,
    delete,
    func,
    insert,
    select,
    update,
    values,
)
from sqlalchemy import column as sql_column
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute

from hcat_notify.errors import InvalidInputError, SubscriberInUseError, SubscriberTakenOverError
from hcat_notify.model.cursor import Cursor
from hcat_notify.store.models import (
    OutboxRow,
    SubscriberRow,
    SubscriberTableRow,
    SubscriberTopicRow,
    SubscriberWatermarkRow,
)
from hcat_notify.store.owners import process_gone
from hcat_notify.store.pruned_marks import chunks, note_claim, topic_marks
from hcat_notify.store.tx import Tx

__all__ = [
    "FLOOR_KEY",
    "RETAINED_KEY",
    "SUBSCRIBER_TIMEOUT",
    "SubscriberInfo",
    "Subscriptions",
    "this_process",
    "validate_subscriber",
]

logger = logging.getLogger(__name__)

FLOOR_KEY = "*"
"""The watermark of topics without one of their own (a cursor's default)."""
RETAINED_KEY = "*retained"
"""How far a durable subscriber that started without a cursor handed out the retained
dones: 0 when it started (its floor stored then), its floor once all were handed out."""

SUBSCRIBER_TIMEOUT = 10.0
"""Seconds without a heartbeat after which a subscriber's owner counts as gone."""
MAX_NAME = 255
LAG_CHUNK = 500
"""Distinct (topic, position) pairs counted by one statement of :func:`lags` (two bound
parameters each: SQLite's limit is 32,766)."""


@dataclass(frozen=True)
class SubscriberInfo:
    """A durable subscriber: its owner, heartbeat age (DB clock), watermarks, and how
    many topics it follows (None: claimed by a version before 0022, or by an older
    library since its topics were stored; it holds every topic of the outbox until it
    next starts)."""

    name: str
    owner: str | None
    heartbeat_age: float
    watermarks: Mapping[str, int]
    followed: int | None = None

    def stored(self) -> tuple[dict[str, int], int | None, bool]:
        """Its topics' watermarks, its floor (None: none stored), and whether it is still
        handing out the retained dones up to the floor (a floor without a mark of the
        retained dones was stored before there was one, once they all were handed out)."""
        marks = dict(self.watermarks)
        retained = marks.pop(RETAINED_KEY, None)
        floor = marks.pop(FLOOR_KEY, None)
        return marks, floor, floor is not None and retained is not None and retained < floor

    @property
    def cursor(self) -> Cursor:
        """Where it stands (:meth:`Cursor.standing`)."""
        marks, floor, pending = self.stored()
        return Cursor.standing(marks, floor, retained_pending=pending)


def validate_subscriber(name: str) -> str:
    """``name`` if it is usable as a subscriber name.

    Raises:
        InvalidInputError: empty, too long, or with spaces or control characters.
    """
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_NAME
        or not name.isprintable()
        or any(char.isspace() for char in name)
    ):
        raise InvalidInputError(
            f"invalid subscriber name {name!r}: 1 to {MAX_NAME} printable characters, no spaces"
        )
    return name


def this_process() -> str:
    """``host:pid``, the owner id of a consumer in this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _gone(owner: str | None, age: float, timeout: float) -> bool:
    """Whether ``owner`` no longer consumes: silent too long, or a dead process here."""
    if owner is None or age >= timeout:
        return True
    host, _, pid = owner.rpartition(":")
    return process_gone(host, pid)  # killed: a restart here need not wait for the timeout


def _watermarks(tx: Tx, name: str) -> dict[str, int]:
    rows = tx.session.execute(
        select(SubscriberWatermarkRow.topic, SubscriberWatermarkRow.last_event_id).where(
            SubscriberWatermarkRow.subscriber == name
        )
    )
    return {row.topic: row.last_event_id for row in rows}


def claim(
    tx: Tx,
    name: str,
    owner: str,
    *,
    takeover: bool,
    timeout: float,
    topics: Collection[str] | None = None,
    tables: Mapping[str, str] | None = None,
) -> SubscriberInfo:
    """Make ``owner`` the consumer of ``name`` (created if new); its watermarks.

    ``topics``: the topics it follows now, ``tables``: the tables it follows now, each
    with its topic (whose topics it follows too); both replace what its previous claim
    stored (neither given: leave them as they are). A topic followed anew (neither it
    nor a table it carries for ``name`` was followed at the previous claim) whose
    history the outbox's retention deleted past where the subscriber would resume it
    starts after what was deleted: it was not held for a subscriber that did not follow
    it.

    Raises:
        SubscriberInUseError: another owner is alive and ``takeover`` is False.
    """
    now = tx.clock()
    stores = topics is not None or tables is not None
    carried = dict(tables or {})
    followed = sorted({*(topics or ()), *carried.values()})
    count = len(followed) if stores else None
    row = tx.session.get(SubscriberRow, name)
    if row is None:
        tx.session.add(
            SubscriberRow(
                name=name,
                owner=owner,
                heartbeat_at=now,
                created_at=now,
                followed=count,
                followed_version=1 if stores else None,
            )
        )
        tx.session.flush()
        if stores:
            _follow(tx, name, followed, carried, (set(), set()))  # no past: nothing owed
        return SubscriberInfo(name, owner, 0.0, MappingProxyType({}), count)
    age = max(0.0, now - row.heartbeat_at)
    if row.owner != owner and not _gone(row.owner, age, timeout) and not takeover:
        raise SubscriberInUseError(
            f"subscriber {name} is in use by {row.owner} (heartbeat {age:.1f} s ago); "
            "stop it, or take it over with --takeover"
        )
    # Stored by a version before 0022 (None), or stale: an older library claimed it
    # since (it bumps the version only); the sweep held every topic for it meanwhile.
    current = row.followed is not None and row.followed_version == row.version
    version = row.version + 1
    changed = tx.session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.name == name, SubscriberRow.version == row.version)
        .values(
            owner=owner,
            heartbeat_at=now,
            version=version,
            followed=count if stores else row.followed,
            followed_version=version if stores or current else row.followed_version,
        )
        .execution_options(synchronize_session=False)
    )
    if changed.rowcount == 0:  # type: ignore[attr-defined]
        raise SubscriberInUseError(f"subscriber {name} was claimed concurrently; try again")
    if stores:
        # Stale ones too: the sweep held those all along, and every topic since the
        # older library's claim; a topic outside them counts as followed anew.
        _follow(tx, name, followed, carried, (set(_followed(tx, name)), set(_tables(tx, name))))
    return SubscriberInfo(
        name,
        owner,
        0.0,
        MappingProxyType(_watermarks(tx, name)),
        count if stores else (row.followed if current else None),
    )


def _followed(tx: Tx, name: str, limit: int | None = None) -> list[str]:
    return _names(tx, SubscriberTopicRow.topic, SubscriberTopicRow.subscriber, name, limit)


def _tables(tx: Tx, name: str, limit: int | None = None) -> list[str]:
    return _names(tx, SubscriberTableRow.table_name, SubscriberTableRow.subscriber, name, limit)


def _names(
    tx: Tx,
    column: InstrumentedAttribute[str],
    owner: InstrumentedAttribute[str],
    name: str,
    limit: int | None,
) -> list[str]:
    """``column`` of the rows of subscriber ``name`` (``owner``), in order, ``limit``."""
    query = select(column).where(owner == name).order_by(column).limit(limit)
    return list(tx.session.execute(query).scalars())


def _follow(
    tx: Tx,
    name: str,
    topics: Sequence[str],
    tables: Mapping[str, str],
    previous: tuple[set[str], set[str]],
) -> None:
    """Store ``topics`` and ``tables`` as what ``name`` follows (``previous``: the topics
    and tables stored before; none before 0022), and raise the positions of the topics
    it follows anew above what the outbox's retention deleted of them."""
    old_topics, old_tables = previous
    # A topic new to it that carries a table it followed: the sweep held that table's
    # events on it (docs/operations.md, "The outbox's retention").
    carried: dict[str, list[str]] = {}
    for table, topic in tables.items():
        if table in old_tables and topic not in old_topics:
            carried.setdefault(topic, []).append(table)
    anew = [topic for topic in topics if topic not in old_topics and topic not in carried]
    for row, column, old, new in (
        (SubscriberTopicRow, SubscriberTopicRow.topic, old_topics, set(topics)),
        (SubscriberTableRow, SubscriberTableRow.table_name, old_tables, set(tables)),
    ):
        for chunk in chunks(sorted(old - new)):
            tx.session.execute(delete(row).where(row.subscriber == name, column.in_(chunk)))
        added = sorted(new - old)
        if added:
            tx.session.execute(
                insert(row), [{"subscriber": name, column.key: value} for value in added]
            )
    if anew or carried:
        _skip_pruned(tx, name, anew, carried)


def _skip_pruned(
    tx: Tx, name: str, topics: Sequence[str], carried: Mapping[str, Sequence[str]]
) -> None:
    """Raise the watermark of each of ``topics`` (followed anew) whose events the outbox's
    retention deleted after where ``name`` would resume it (its watermark, else its
    floor; 0 for one without a floor): the sweep did not hold them for it, and its
    catch-up would otherwise meet HistoryGoneError at every start. A topic of
    ``carried`` (new to it, carrying tables it followed: the sweep held their events)
    is raised no further than below the first event of those tables after where it
    would resume it: only other tables' events are skipped."""
    marks = _watermarks(tx, name)
    if not marks:
        return  # no past: its first start hands out the retained dones, then live
    floor = marks.get(FLOOR_KEY, 0)
    # A sweep's batch either committed its marks before these are read, or judges again
    # after this claim.
    note_claim(tx)
    raised = {}
    for topic, mark in topic_marks(tx, [*topics, *carried]).items():
        position = max(marks.get(topic, 0), floor)
        if topic in carried:
            first = tx.session.execute(
                select(func.min(OutboxRow.event_id)).where(
                    OutboxRow.topic == topic,
                    OutboxRow.table_name.in_(carried[topic]),
                    OutboxRow.event_id > position,
                )
            ).scalar_one()
            mark = mark if first is None else min(mark, first - 1)
        if mark > position:
            raised[topic] = mark
    for topic, mark in sorted(raised.items()):
        logger.info(
            "subscriber %s follows topic %s anew: the outbox's retention deleted its events "
            "through %d, its catch-up of the topic starts after them",
            name,
            topic,
            mark,
        )
    _raise_watermarks(tx, name, raised)


def _fence(tx: Tx, name: str, owner: str) -> None:
    """Refresh the heartbeat, if ``owner`` still owns ``name``.

    Raises:
        SubscriberTakenOverError: another process owns it now.
    """
    kept = tx.session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.name == name, SubscriberRow.owner == owner)
        .values(heartbeat_at=tx.clock())
    )
    if kept.rowcount == 0:  # type: ignore[attr-defined]
        current = tx.session.execute(
            select(SubscriberRow.owner).where(SubscriberRow.name == name)
        ).scalar_one_or_none()
        raise SubscriberTakenOverError(
            f"subscriber {name} was taken over by {current or 'nobody'}; this consumer stops"
        )


def advance(tx: Tx, name: str, owner: str, watermarks: Mapping[str, int]) -> None:
    """Raise the watermarks of ``name`` (never lower them), fenced by its owner."""
    _fence(tx, name, owner)
    _raise_watermarks(tx, name, watermarks)


def _raise_watermarks(tx: Tx, name: str, watermarks: Mapping[str, int]) -> None:
    if not watermarks:
        return
    now = tx.clock()
    dialect = postgresql if tx.dialect == "postgresql" else sqlite
    statement = dialect.insert(SubscriberWatermarkRow).values(
        [
            {"subscriber": name, "topic": t, "last_event_id": i, "updated_at": now, "version": 1}
            for t, i in watermarks.items()
        ]
    )
    excluded = statement.excluded
    statement = statement.on_conflict_do_update(
        index_elements=[SubscriberWatermarkRow.subscriber, SubscriberWatermarkRow.topic],
        set_={
            "last_event_id": case(
                (
                    excluded.last_event_id > SubscriberWatermarkRow.last_event_id,
                    excluded.last_event_id,
                ),
                else_=SubscriberWatermarkRow.last_event_id,
            ),
            "updated_at": excluded.updated_at,
            "version": SubscriberWatermarkRow.version + 1,
        },
    )
    tx.session.execute(statement)


def release(tx: Tx, name: str, owner: str) -> None:
    """Give the name up (a clean stop): the next claim needs no takeover."""
    tx.session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.name == name, SubscriberRow.owner == owner)
        .values(owner=None)
    )


def subscribers(tx: Tx) -> list[SubscriberInfo]:
    """Every durable subscriber with its watermarks."""
    now = tx.clock()
    marks: dict[str, dict[str, int]] = {}
    for row in tx.session.execute(select(SubscriberWatermarkRow)).scalars():
        marks.setdefault(row.subscriber, {})[row.topic] = row.last_event_id
    return [
        SubscriberInfo(
            row.name,
            row.owner,
            max(0.0, now - row.heartbeat_at),
            MappingProxyType(marks.get(row.name, {})),
            row.followed if row.followed_version == row.version else None,
        )
        for row in tx.session.scalars(select(SubscriberRow).order_by(SubscriberRow.name))
    ]


def lag(tx: Tx, subscriber: SubscriberInfo) -> dict[str, int]:
    """Events on each topic ``subscriber`` follows after where it stands: how far behind
    it is (:func:`lags` of one)."""
    return lags(tx, [subscriber])[subscriber.name]


def lags(tx: Tx, found: Sequence[SubscriberInfo]) -> dict[str, dict[str, int]]:
    """Per subscriber of ``found``, the events on each topic it follows after where it
    stands. Its position on a topic is its watermark there, at least its floor (a topic
    without a watermark: the floor; neither: the topic's start); one claimed before 0022
    counts the topics it has watermarks of.

    A few statements whatever the number of subscribers (``/metrics`` and
    ``hcat-notify subscribers`` read every one): the followed topics of all in one, then
    one count per distinct (topic, position), :data:`LAG_CHUNK` of them a statement.
    """
    stored = {item.name: item.stored() for item in found}
    followed: dict[str, list[str]] = {}
    if any(item.followed is not None for item in found):
        query = select(SubscriberTopicRow.subscriber, SubscriberTopicRow.topic)
        for name, topic in tx.session.execute(query):
            followed.setdefault(name, []).append(topic)
    positions: dict[str, dict[str, int]] = {}
    for item in found:
        marks, floor, _pending = stored[item.name]
        topics = sorted(followed.get(item.name, ())) if item.followed is not None else sorted(marks)
        positions[item.name] = {t: max(marks.get(t, 0), floor or 0) for t in topics}
    pairs = sorted({pair for each in positions.values() for pair in each.items()})
    counts: dict[tuple[str, int], int] = {}
    for part in _slices(pairs, LAG_CHUNK):
        wanted = (
            values(sql_column("topic", String), sql_column("position", BigInteger), name="wanted")
            .data(list(part))
            .cte()
        )
        query = (
            select(wanted.c.topic, wanted.c.position, func.count(OutboxRow.event_id))
            .join(
                OutboxRow,
                (OutboxRow.topic == wanted.c.topic) & (OutboxRow.event_id > wanted.c.position),
            )
            .group_by(wanted.c.topic, wanted.c.position)
        )
        rows = cast("Iterable[tuple[str, int, int]]", tx.session.execute(query))
        for topic, position, count in rows:
            counts[(topic, int(position))] = int(count)
    return {
        name: {topic: counts.get((topic, at), 0) for topic, at in each.items()}
        for name, each in positions.items()
    }


def _slices(items: Sequence[tuple[str, int]], size: int) -> Iterator[Sequence[tuple[str, int]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def remove(tx: Tx, name: str) -> bool:
    """Forget a subscriber, its watermarks, followed topics and tables; whether it
    existed."""
    tx.session.execute(
        delete(SubscriberWatermarkRow).where(SubscriberWatermarkRow.subscriber == name)
    )
    tx.session.execute(delete(SubscriberTopicRow).where(SubscriberTopicRow.subscriber == name))
    tx.session.execute(delete(SubscriberTableRow).where(SubscriberTableRow.subscriber == name))
    return bool(
        tx.session.execute(delete(SubscriberRow).where(SubscriberRow.name == name)).rowcount  # type: ignore[attr-defined]
    )


class Subscriptions:
    """Durable subscribers in the catalog (``catalog.subscriptions``); each call is one
    transaction.

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def claim(
        self,
        name: str,
        owner: str,
        *,
        takeover: bool = False,
        timeout: float = SUBSCRIBER_TIMEOUT,
        topics: Collection[str] | None = None,
        tables: Mapping[str, str] | None = None,
    ) -> SubscriberInfo:
        """Own ``name`` (refused while another owner lives, unless ``takeover``);
        ``topics`` and ``tables`` (each with its topic): what it follows now (see
        :func:`claim`)."""
        validate_subscriber(name)
        with self._transaction(write=True) as tx:
            return claim(
                tx,
                name,
                owner,
                takeover=takeover,
                timeout=timeout,
                topics=topics,
                tables=tables,
            )

    def followed(self, name: str, *, limit: int | None = None) -> list[str]:
        """The topics ``name`` follows (its last claim's), in name order, the first
        ``limit`` if given."""
        with self._transaction() as tx:
            return _followed(tx, name, limit)

    def followed_tables(self, name: str, *, limit: int | None = None) -> list[str]:
        """The tables ``name`` follows (its last claim's), in name order, the first
        ``limit`` if given."""
        with self._transaction() as tx:
            return _tables(tx, name, limit)

    def heartbeat(self, name: str, owner: str) -> None:
        """Still consuming (raises SubscriberTakenOverError if no longer the owner)."""
        with self._transaction(write=True) as tx:
            _fence(tx, name, owner)

    def advance(self, name: str, owner: str, watermarks: Mapping[str, int]) -> None:
        """Raise watermarks after handled notifications, fenced by the owner."""
        with self._transaction(write=True) as tx:
            advance(tx, name, owner, watermarks)

    def release(self, name: str, owner: str) -> None:
        """Give the name up."""
        with self._transaction(write=True) as tx:
            release(tx, name, owner)

    def every(self) -> list[SubscriberInfo]:
        """Every durable subscriber."""
        with self._transaction() as tx:
            return subscribers(tx)

    def lag(self, subscriber: SubscriberInfo) -> dict[str, int]:
        """Events on each topic ``subscriber`` follows after where it stands
        (:func:`lag`)."""
        with self._transaction() as tx:
            return lag(tx, subscriber)

    def lags(self, found: Sequence[SubscriberInfo]) -> dict[str, dict[str, int]]:
        """:meth:`lag` of each of ``found``, by name, in a few statements (:func:`lags`)."""
        with self._transaction() as tx:
            return lags(tx, found)

    def remove(self, names: Sequence[str]) -> list[str]:
        """Forget subscribers; the ones that existed."""
        with self._transaction(write=True) as tx:
            return [name for name in names if remove(tx, name)]
