"""How far the outbox's retention deleted each topic's events (``hcat_outbox_pruned``):
the marks a read of deleted history is checked against, and the lock that orders a
sweep's batch with whatever must not work from marks being moved (a webhook's replay, a
durable subscriber's claim of topics it follows anew)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, TypeVar

from sqlalchemy import Executable, case, select, update
from sqlalchemy.dialects import postgresql, sqlite

from hcat_notify.store.models import OutboxPrunedRow
from hcat_notify.store.tx import Tx

__all__ = [
    "ALL_TOPICS",
    "IN_CHUNK",
    "Marks",
    "chunks",
    "lock_marks",
    "move_marks",
    "note_claim",
    "read_claims",
    "topic_marks",
]

_T = TypeVar("_T")

ALL_TOPICS = "*"
"""The topic of the row that holds the highest mark of all (and the sweep's figures)."""

IN_CHUNK = 500
"""Values per IN list: a batch may hold up to 100,000 events, PostgreSQL's protocol at
most 65,535 parameters a statement."""


def chunks(values: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """``values`` in slices of at most :data:`IN_CHUNK`."""
    for start in range(0, len(values), IN_CHUNK):
        yield values[start : start + IN_CHUNK]


class Marks(NamedTuple):
    """The row of all topics: the highest mark, and the claims that followed topics anew."""

    pruned_through: int
    claims: int


def lock_marks(tx: Tx, *, share: bool) -> Marks:
    """The highest mark of all, its row locked (PostgreSQL) for the transaction: ``share``
    by a replay's check, exclusively by a sweep's batch and a subscriber's claim of
    topics it follows anew (:func:`note_claim`), so that a batch never works from
    webhooks, followed topics or marks another transaction is changing."""
    query = select(OutboxPrunedRow.pruned_through, OutboxPrunedRow.claims).where(
        OutboxPrunedRow.topic == ALL_TOPICS
    )
    if tx.dialect == "postgresql":
        query = query.with_for_update(read=share)
    found = tx.connection().execute(query).one_or_none()
    if found is None:  # a catalog whose row was removed by hand: start again from 0
        move_marks(tx, {ALL_TOPICS: 0})
        return Marks(0, 0)
    return Marks(int(found.pruned_through), int(found.claims))


def read_claims(tx: Tx) -> int:
    """How many claims followed topics anew (no lock: a batch's judging reads it first)."""
    query = select(OutboxPrunedRow.claims).where(OutboxPrunedRow.topic == ALL_TOPICS)
    return int(tx.connection().execute(query).scalar_one_or_none() or 0)


def note_claim(tx: Tx) -> None:
    """A durable subscriber follows topics anew: count it (a sweep's batch judged before
    judges again), the row locked until the claim commits, so that the marks the claim
    reads next are those of every batch committed before it."""
    lock_marks(tx, share=False)
    tx.connection().execute(
        update(OutboxPrunedRow)
        .where(OutboxPrunedRow.topic == ALL_TOPICS)
        .values(claims=OutboxPrunedRow.claims + 1)
    )


def topic_marks(tx: Tx, topics: Iterable[str]) -> dict[str, int]:
    """The mark of each of ``topics`` that has one (the highest id deleted of it)."""
    found: dict[str, int] = {}
    for chunk in chunks(sorted(set(topics))):
        rows = tx.connection().execute(
            select(OutboxPrunedRow.topic, OutboxPrunedRow.pruned_through).where(
                OutboxPrunedRow.topic.in_(chunk)
            )
        )
        found.update({row.topic: int(row.pruned_through) for row in rows})
    return found


def move_marks(tx: Tx, marks: Mapping[str, int]) -> None:
    """Raise the marks of ``marks``' topics to their values (never lower them)."""
    rows = [{"topic": topic, "pruned_through": mark} for topic, mark in sorted(marks.items())]
    if rows:
        tx.connection().execute(_marks_upsert(tx.dialect), rows)


@functools.cache
def _marks_upsert(dialect_name: str) -> Executable:
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    row = OutboxPrunedRow
    statement = dialect.insert(row)
    excluded = statement.excluded
    upsert: Executable = statement.on_conflict_do_update(
        index_elements=[row.topic],
        set_={
            "pruned_through": case(
                (excluded.pruned_through > row.pruned_through, excluded.pruned_through),
                else_=row.pruned_through,
            )
        },
    )
    return upsert
