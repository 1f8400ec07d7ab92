"""The relay group in the catalog: members, the controller, buckets, and the group's
status as every view shows it (who is alive, by each member's own session timeout).

Kafka's controller and leader epochs, Hedwig's topic ownership and persistence info, on
SQL rows: every write that two processes may race on is conditional (on the controller's
epoch, on a bucket's owner and epoch), and every lease is judged by the database's clock
(:meth:`Tx.clock`). What the members published is in :mod:`hcat_notify.store.progress`
(its names are re-exported here). The design is in docs/relay-group.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from hcat_notify.errors import InvalidInputError
from hcat_notify.store.event_ids import ids_in_flight
from hcat_notify.store.models import RelayBucketRow, RelayGroupRow, RelayMemberRow
from hcat_notify.store.owners import process_gone
from hcat_notify.store.progress import (
    BucketProgress,
    is_published,
    last_publish_by_topic,
    move_positions,
    progress_of_topics,
    record_progress,
    topic_progress,
    unpublished_filter,
)
from hcat_notify.store.tx import RELAY_CHANNEL, Tx

__all__ = [
    "BucketInfo",
    "BucketProgress",
    "GroupInfo",
    "GroupStatus",
    "MemberInfo",
    "MemberReport",
    "Ownership",
    "RelayGroup",
    "assign",
    "bucket_count",
    "buckets",
    "claim_controller",
    "forget_members",
    "group_info",
    "heartbeat",
    "is_published",
    "join",
    "last_publish_by_topic",
    "leave",
    "members",
    "move_positions",
    "owned",
    "progress_of_topics",
    "record_progress",
    "release",
    "resign_controller",
    "status",
    "topic_progress",
    "unpublished_filter",
    "version",
]


@dataclass(frozen=True)
class MemberReport:
    """What a relay says about itself at each heartbeat."""

    member_id: str
    host: str
    pid: int
    events_per_second: float = 0.0
    backlog: int = 0
    topics: int = 0
    bucket_loads: Mapping[int, float] = field(default_factory=dict)
    oldest_unpublished_age: float | None = None  # seconds, by the member's reading


@dataclass(frozen=True)
class MemberInfo:
    """A member as the catalog sees it; ages are by the database's clock.

    ``alive``: its heartbeat is younger than its session timeout (the one it joined
    with, unless the reader judged every member by one timeout of its own).
    """

    member_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_age: float
    events_per_second: float
    backlog: int
    topics: int
    bucket_loads: Mapping[int, float]
    oldest_unpublished_age: float | None
    leaving: bool
    session_timeout: float
    alive: bool


@dataclass(frozen=True)
class BucketInfo:
    """A bucket: its owner (None: unassigned), ownership epoch, last move."""

    bucket: int
    owner: str | None
    epoch: int
    moved_at: float
    published_through: int
    rebalanced_at: float = 0.0


@dataclass(frozen=True)
class GroupInfo:
    """The group's fixed bucket count and its controller, at ``now`` (DB clock)."""

    bucket_count: int
    controller_id: str | None
    controller_epoch: int
    controller_expires: float
    now: float

    @property
    def controller_alive(self) -> bool:
        return self.controller_id is not None and self.controller_expires > self.now


@dataclass(frozen=True)
class GroupStatus:
    """The relay group at one moment, read in one transaction: what every view of the
    group renders (``hcat-notify status``, the status page, ``/metrics``, the controller,
    ``relay --once``), so that they agree on who is alive.

    Attributes:
        info: the bucket count and the controller lease; ``info.now`` is the database's
            clock the members' ages were measured by.
        members: every member row (dead ones too, until the controller removes them),
            by member id, each alive or not by its own session timeout.
        buckets: every bucket, in order.
    """

    info: GroupInfo
    members: tuple[MemberInfo, ...]
    buckets: tuple[BucketInfo, ...]

    @property
    def live(self) -> list[MemberInfo]:
        """The members alive."""
        return [member for member in self.members if member.alive]

    @property
    def silent(self) -> list[MemberInfo]:
        """The members silent for longer than their session timeout (dead)."""
        return [member for member in self.members if not member.alive]

    @property
    def unassigned(self) -> list[int]:
        """The buckets nobody owns."""
        return [bucket.bucket for bucket in self.buckets if bucket.owner is None]

    def owners(self) -> dict[str, list[int]]:
        """Each owner's buckets (members that own none are absent)."""
        owned: dict[str, list[int]] = {}
        for bucket in self.buckets:
            if bucket.owner is not None:
                owned.setdefault(bucket.owner, []).append(bucket.bucket)
        return owned


@dataclass(frozen=True)
class Ownership:
    """A bucket a member owns: the epoch to fence its writes with, where to read from."""

    bucket: int
    epoch: int
    published_through: int


def bucket_count(session: Session) -> int:
    """The catalog's bucket count (fixed when the catalog was created)."""
    return int(
        session.execute(
            select(RelayGroupRow.bucket_count).where(RelayGroupRow.id == 1)
        ).scalar_one()
    )


def group_info(tx: Tx) -> GroupInfo:
    """The bucket count and the controller lease."""
    row = tx.session.get(RelayGroupRow, 1)
    if row is None:  # pragma: no cover - the migration creates it
        raise InvalidInputError("the catalog has no relay group: run 'hcat-notify db upgrade'")
    return GroupInfo(
        row.bucket_count,
        row.controller_id,
        row.controller_epoch,
        row.controller_expires,
        tx.clock(),
    )


def heartbeat(tx: Tx, report: MemberReport, *, session_timeout: float | None = None) -> float:
    """Record that ``report``'s member is alive (DB clock) and its load; the clock.

    ``session_timeout``: the member's, recorded with its row (None: the row keeps the one
    it has; a new row gets the relays' default, 3 s).
    """
    now = tx.clock()
    values: dict[str, Any] = {
        "host": report.host,
        "pid": report.pid,
        "heartbeat_at": now,
        "events_per_second": report.events_per_second,
        "backlog": report.backlog,
        "topics": report.topics,
        "bucket_loads": {str(bucket): load for bucket, load in report.bucket_loads.items()},
        "oldest_unpublished": (
            None if report.oldest_unpublished_age is None else now - report.oldest_unpublished_age
        ),
    }
    if session_timeout is not None:
        values["session_timeout"] = session_timeout
    updated = tx.session.execute(
        update(RelayMemberRow).where(RelayMemberRow.member_id == report.member_id).values(**values)
    )
    if updated.rowcount == 0:  # type: ignore[attr-defined]
        tx.session.execute(
            insert(RelayMemberRow).values(
                member_id=report.member_id, started_at=now, leaving=False, **values
            )
        )
        _changed(tx)  # a new member: the controller rebalances now
    return now


def join(tx: Tx, report: MemberReport, *, session_timeout: float) -> float:
    """Register ``report``'s member (its first heartbeat) with its session timeout; the
    clock. The row of a previous process under the same id is taken over once it has
    been silent for ``session_timeout`` (or its process is gone from this host).

    Raises:
        InvalidInputError: another live process already runs under this member id.
    """
    row = tx.session.execute(
        select(RelayMemberRow.host, RelayMemberRow.pid, RelayMemberRow.heartbeat_at).where(
            RelayMemberRow.member_id == report.member_id
        )
    ).first()
    if row is not None and (row.host, row.pid) != (report.host, report.pid):
        age = tx.clock() - row.heartbeat_at
        if age < session_timeout and not process_gone(row.host, row.pid):
            raise InvalidInputError(
                f"relay member id {report.member_id!r} is in use by {row.host}:{row.pid} "
                f"(heartbeat {age:.1f} s ago): give each relay its own --member-id"
            )
    return heartbeat(tx, report, session_timeout=session_timeout)


def _changed(tx: Tx) -> None:
    """The group changed (members, owners, controller): wake the members now."""
    tx.session.execute(
        update(RelayGroupRow).where(RelayGroupRow.id == 1).values(version=RelayGroupRow.version + 1)
    )
    tx.notify(RELAY_CHANNEL)


def version(tx: Tx) -> int:
    """The group row's version: it moves with every change of members, owners or
    controller, so a member can tell cheaply whether it must look again."""
    return int(
        tx.session.execute(select(RelayGroupRow.version).where(RelayGroupRow.id == 1)).scalar_one()
    )


def leave(tx: Tx, member_id: str) -> list[int]:
    """Remove a member, giving up its buckets and the controller role; the buckets."""
    given_up = release(tx, member_id, None)
    tx.session.execute(
        update(RelayGroupRow)
        .where(RelayGroupRow.id == 1, RelayGroupRow.controller_id == member_id)
        .values(controller_id=None, controller_expires=0.0)
    )
    tx.session.execute(delete(RelayMemberRow).where(RelayMemberRow.member_id == member_id))
    _changed(tx)
    return given_up


def members(tx: Tx) -> list[MemberInfo]:
    """Every member row (dead ones too, until the controller removes them), each alive
    or not by its own session timeout."""
    now = tx.clock()
    return [_member_info(row, now, None) for row in _member_rows(tx)]


def _member_rows(tx: Tx) -> Iterable[RelayMemberRow]:
    return tx.session.scalars(select(RelayMemberRow).order_by(RelayMemberRow.member_id))


def _member_info(row: RelayMemberRow, now: float, session_timeout: float | None) -> MemberInfo:
    """The member of ``row`` at ``now`` (DB clock): the one judgment of liveness."""
    age = max(0.0, now - row.heartbeat_at)
    timeout = row.session_timeout if session_timeout is None else session_timeout
    return MemberInfo(
        member_id=row.member_id,
        host=row.host,
        pid=row.pid,
        started_at=row.started_at,
        heartbeat_age=age,
        events_per_second=row.events_per_second,
        backlog=row.backlog,
        topics=row.topics,
        bucket_loads=MappingProxyType(
            {int(bucket): float(load) for bucket, load in (row.bucket_loads or {}).items()}
        ),
        oldest_unpublished_age=(
            None if row.oldest_unpublished is None else max(0.0, now - row.oldest_unpublished)
        ),
        leaving=row.leaving,
        session_timeout=row.session_timeout,
        alive=age < timeout,
    )


def status(tx: Tx, session_timeout: float | None = None) -> GroupStatus:
    """The group as every view shows it (see :class:`GroupStatus`); ``session_timeout``
    judges every member by that timeout instead of its own."""
    info = group_info(tx)
    return GroupStatus(
        info,
        tuple(_member_info(row, info.now, session_timeout) for row in _member_rows(tx)),
        tuple(buckets(tx)),
    )


def forget_members(tx: Tx, member_ids: Iterable[str]) -> None:
    """Delete the rows of members found dead (their buckets were reassigned)."""
    ids = list(member_ids)
    if ids:
        tx.session.execute(delete(RelayMemberRow).where(RelayMemberRow.member_id.in_(ids)))


def claim_controller(tx: Tx, member_id: str, ttl: float) -> int | None:
    """Take, or renew, the controller role for ``ttl`` seconds; its epoch, or None.

    Compare-and-set on the group row's version: of two members racing for an expired
    role, one wins; the epoch increases at every change of controller.
    """
    now = tx.clock()
    row = tx.session.get(RelayGroupRow, 1)
    assert row is not None
    if row.controller_id == member_id and row.controller_expires > now:
        epoch = row.controller_epoch
    elif row.controller_id is None or row.controller_expires <= now:
        epoch = row.controller_epoch + 1
    else:
        return None
    changed = tx.session.execute(
        update(RelayGroupRow)
        .where(RelayGroupRow.id == 1, RelayGroupRow.version == row.version)
        .values(
            controller_id=member_id,
            controller_epoch=epoch,
            controller_expires=now + ttl,
            version=row.version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    return epoch if changed.rowcount else None  # type: ignore[attr-defined]


def resign_controller(tx: Tx, member_id: str, epoch: int) -> None:
    """Give up the controller role (SIGTERM), so another member takes it at once."""
    tx.session.execute(
        update(RelayGroupRow)
        .where(
            RelayGroupRow.id == 1,
            RelayGroupRow.controller_id == member_id,
            RelayGroupRow.controller_epoch == epoch,
        )
        .values(controller_id=None, controller_expires=0.0, version=RelayGroupRow.version + 1)
    )
    tx.notify(RELAY_CHANNEL)  # another member takes over at once


def buckets(tx: Tx) -> list[BucketInfo]:
    """Every bucket, in order."""
    return [
        BucketInfo(
            row.bucket,
            row.owner,
            row.epoch,
            row.moved_at,
            row.published_through,
            row.rebalanced_at,
        )
        for row in tx.session.scalars(select(RelayBucketRow).order_by(RelayBucketRow.bucket))
    ]


def assign(
    tx: Tx,
    member_id: str,
    controller_epoch: int,
    changes: Mapping[int, str | None],
    rebalanced: Iterable[int] = (),
) -> bool:
    """Move buckets to new owners, if ``member_id`` is still the controller of that epoch.

    The first statement is the fence: it touches the group row only while the lease is
    this member's, unexpired, at ``controller_epoch`` (on PostgreSQL it also locks the row
    until commit, so a new controller's claim waits). A deposed controller changes
    nothing. Each moved bucket's epoch increases.

    ``rebalanced`` names the moves made to even the group out (not adoptions of buckets
    whose owner is gone): those stay put for the minimum move interval.

    Returns:
        False if the controller was deposed (nothing changed).
    """
    now = tx.clock()
    fenced = tx.session.execute(
        update(RelayGroupRow)
        .where(
            RelayGroupRow.id == 1,
            RelayGroupRow.controller_id == member_id,
            RelayGroupRow.controller_epoch == controller_epoch,
            RelayGroupRow.controller_expires > now,
        )
        .values(version=RelayGroupRow.version + 1)
    )
    if fenced.rowcount == 0:  # type: ignore[attr-defined]
        return False
    if changes and tx.dialect == "postgresql":
        # lock the moved buckets' rows in bucket order, as the publisher's and the webhook
        # recorder's fences take them; the updates below, one per kind of move, would take
        # them in another (a deadlock at a rebalance, retried by both, but a lost round)
        tx.session.execute(
            select(RelayBucketRow.bucket)
            .where(RelayBucketRow.bucket.in_(sorted(changes)))
            .order_by(RelayBucketRow.bucket)
            .with_for_update()
        )
    balancing = set(rebalanced)
    groups: dict[tuple[str | None, bool], list[int]] = {}
    for bucket, owner in changes.items():
        groups.setdefault((owner, bucket in balancing), []).append(bucket)
    for (owner, rebalancing), moved in groups.items():  # one statement per kind of move
        values: dict[str, Any] = {
            "owner": owner,
            "epoch": RelayBucketRow.epoch + 1,
            "moved_at": now,
        }
        if rebalancing:
            values["rebalanced_at"] = now
        tx.session.execute(
            update(RelayBucketRow).where(RelayBucketRow.bucket.in_(moved)).values(**values)
        )
    if changes:
        tx.notify(RELAY_CHANNEL)
    return True


def owned(tx: Tx, member_id: str) -> dict[int, Ownership]:
    """The buckets ``member_id`` owns now."""
    rows = tx.session.execute(
        select(RelayBucketRow.bucket, RelayBucketRow.epoch, RelayBucketRow.published_through)
        .where(RelayBucketRow.owner == member_id)
        .order_by(RelayBucketRow.bucket)
    )
    return {row.bucket: Ownership(row.bucket, row.epoch, row.published_through) for row in rows}


def release(tx: Tx, member_id: str, given: Sequence[int] | None) -> list[int]:
    """Give up buckets (all of them when ``given`` is None); the ones given up.

    Only buckets the member still owns change: their owner becomes None and their epoch
    increases, so nothing the member might still write about them counts.
    """
    condition = [RelayBucketRow.owner == member_id]
    if given is not None:
        if not given:
            return []
        condition.append(RelayBucketRow.bucket.in_(list(given)))
    released = list(tx.session.scalars(select(RelayBucketRow.bucket).where(*condition)))
    if released:
        tx.session.execute(
            update(RelayBucketRow)
            .where(*condition)
            .values(owner=None, epoch=RelayBucketRow.epoch + 1, moved_at=tx.clock())
        )
        _changed(tx)
    return released


class RelayGroup:
    """The relay group's part of the catalog (``catalog.group``); each call is one
    transaction.

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def version(self) -> int:
        """The group row's version (moves with every change of the group)."""
        with self._transaction() as tx:
            return version(tx)

    def info(self) -> GroupInfo:
        """The bucket count and the controller lease, with the database's clock."""
        with self._transaction() as tx:
            return group_info(tx)

    def ids_in_flight(self) -> bool:
        """Whether an open transaction holds event ids (see
        :func:`~hcat_notify.store.event_ids.ids_in_flight`)."""
        with self._transaction() as tx:
            return ids_in_flight(tx.session.connection())

    def join(self, report: MemberReport, *, session_timeout: float) -> float:
        """Register a relay, refusing a member id another live process runs under."""
        with self._transaction(write=True) as tx:
            return join(tx, report, session_timeout=session_timeout)

    def heartbeat(self, report: MemberReport, *, session_timeout: float | None = None) -> float:
        """Record that a relay is alive, with its load (and its session timeout, if
        given); the database's clock."""
        with self._transaction(write=True) as tx:
            return heartbeat(tx, report, session_timeout=session_timeout)

    def members(self) -> list[MemberInfo]:
        """Every member row, with heartbeat ages by the database's clock, each alive or
        not by its own session timeout."""
        with self._transaction() as tx:
            return members(tx)

    def status(self, session_timeout: float | None = None) -> GroupStatus:
        """The controller, members (alive or not) and buckets in one read: what every
        view of the group renders; ``session_timeout`` judges every member by that
        timeout instead of its own."""
        with self._transaction() as tx:
            return status(tx, session_timeout)

    def leave(self, member_id: str) -> list[int]:
        """Remove a member, releasing its buckets and the controller role."""
        with self._transaction(write=True) as tx:
            return leave(tx, member_id)

    def forget(self, member_ids: Sequence[str]) -> None:
        """Delete the rows of members the controller found dead."""
        with self._transaction(write=True) as tx:
            forget_members(tx, member_ids)

    def claim_controller(self, member_id: str, ttl: float) -> int | None:
        """Take or renew the controller role; its epoch, or None if another has it."""
        with self._transaction(write=True) as tx:
            return claim_controller(tx, member_id, ttl)

    def resign_controller(self, member_id: str, epoch: int) -> None:
        """Give up the controller role."""
        with self._transaction(write=True) as tx:
            resign_controller(tx, member_id, epoch)

    def buckets(self) -> list[BucketInfo]:
        """Every bucket with its owner and epoch."""
        with self._transaction() as tx:
            return buckets(tx)

    def assign(
        self,
        member_id: str,
        controller_epoch: int,
        changes: Mapping[int, str | None],
        rebalanced: Iterable[int] = (),
    ) -> bool:
        """Move buckets, conditional on the controller's epoch; False if deposed."""
        with self._transaction(write=True) as tx:
            return assign(tx, member_id, controller_epoch, changes, rebalanced)

    def owned(self, member_id: str) -> dict[int, Ownership]:
        """The buckets a member owns now."""
        with self._transaction() as tx:
            return owned(tx, member_id)

    def release(self, member_id: str, given: Sequence[int] | None = None) -> list[int]:
        """Give buckets up (all when ``given`` is None); the ones given up."""
        with self._transaction(write=True) as tx:
            return release(tx, member_id, given)

    def record_progress(self, member_id: str, updates: Mapping[int, BucketProgress]) -> set[int]:
        """Record published progress per bucket, fenced by epoch; the buckets lost (of
        those with topics: the position of a bucket without is only moved).

        The one way to record progress (the store's :func:`record_progress` is its second
        step): positions first, in a transaction of their own that takes its row locks in
        one scan as the controller's assignment does (:func:`move_positions`: the two
        cannot deadlock), then the buckets that published topics, compare-and-set each."""
        positions = {bucket: p for bucket, p in updates.items() if not p.topics}
        if positions:
            with self._transaction(write=True) as tx:
                move_positions(tx, member_id, positions)
        busy = {bucket: p for bucket, p in updates.items() if p.topics}
        if not busy:
            return set()
        with self._transaction(write=True) as tx:
            return record_progress(tx, member_id, busy)

    def progress(self, in_buckets: Iterable[int] | None = None) -> dict[str, int]:
        """Highest published event id per topic (of some buckets, or all)."""
        with self._transaction() as tx:
            return topic_progress(tx, in_buckets)

    def progress_of(self, topics: Iterable[str]) -> dict[str, int]:
        """Highest published event id of each of ``topics`` that has one."""
        with self._transaction() as tx:
            return progress_of_topics(tx, topics)
