"""The timed pass over sets: the verdicts that need a clock (quiet periods ending,
deadlines), given by the relay member that owns the bucket of the table's topic, fenced
by the bucket's epoch like progress (docs/completeness.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Select, select

from hcat_notify.model.completeness import SetRule
from hcat_notify.store.completeness import due_verdicts
from hcat_notify.store.models import RelayBucketRow, SetStateRow, TableRow
from hcat_notify.store.set_records import DuePass
from hcat_notify.store.set_rules import current_rule
from hcat_notify.store.tx import Tx

__all__ = ["evaluate_due", "nothing_due"]


def _fenced(
    tx: Tx, member: str, buckets: Mapping[int, int], *, lock: bool = True
) -> tuple[list[int], set[int]]:
    """The buckets ``member`` still owns at the epochs given (with ``lock``, locked
    against a move until ``tx`` ends, on PostgreSQL: one scan in bucket order, as the
    controller's), and those it lost."""
    query = (
        select(RelayBucketRow.bucket, RelayBucketRow.epoch)
        .where(RelayBucketRow.bucket.in_(sorted(buckets)), RelayBucketRow.owner == member)
        .order_by(RelayBucketRow.bucket)
    )
    if lock and tx.dialect == "postgresql":
        query = query.with_for_update()
    held = {row.bucket: row.epoch for row in tx.session.execute(query)}
    kept = [bucket for bucket, epoch in sorted(buckets.items()) if held.get(bucket) == epoch]
    return kept, set(buckets) - set(kept)


def _due_buckets(tx: Tx, buckets: Mapping[int, int], clock: float) -> dict[int, int]:
    """Those of ``buckets`` (bucket: epoch) with a set due by ``clock`` (no lock)."""
    due = tx.session.scalars(
        select(SetStateRow.bucket)
        .where(
            SetStateRow.bucket.in_(sorted(buckets)),
            SetStateRow.due_at.is_not(None),
            SetStateRow.due_at <= clock,
        )
        .distinct()
    )
    return {bucket: buckets[bucket] for bucket in due}


def _due_query(buckets: Sequence[int], clock: float) -> Select[SetStateRow]:
    return (
        select(SetStateRow)
        .where(
            SetStateRow.bucket.in_(list(buckets)),
            SetStateRow.due_at.is_not(None),
            SetStateRow.due_at <= clock,
        )
        .order_by(SetStateRow.due_at)
    )


def nothing_due(
    tx: Tx, member: str, buckets: Mapping[int, int], *, now: float | None
) -> DuePass | None:
    """The timed pass's answer when no set of the buckets ``member`` owns is due (indexed
    reads, no lock), else None: the pass must run (:func:`evaluate_due`)."""
    clock = tx.clock() if now is None else now
    kept, lost = _fenced(tx, member, _due_buckets(tx, buckets, clock), lock=False)
    if kept:
        return None
    return DuePass(0, (), (), frozenset(lost))


def evaluate_due(
    tx: Tx, member: str, buckets: Mapping[int, int], *, now: float | None, limit: int
) -> DuePass:
    """The timed pass over the sets of ``buckets`` (bucket: the epoch ``member`` owns it
    at) due by ``now`` (default: the database's clock): dones after quiet periods,
    deadlines' verdicts. Fenced like progress: nothing is written for a bucket the member
    no longer owns at that epoch. Sets a writer holds locked are left to that writer
    (PostgreSQL: ``SKIP LOCKED``; it settles them itself). Only the buckets with a set
    due are fenced (locked): a pass with nothing due takes no lock and writes nothing."""
    clock = tx.clock() if now is None else now
    kept, lost = _fenced(tx, member, _due_buckets(tx, buckets, clock))
    if not kept:
        return DuePass(0, (), (), frozenset(lost))
    query = _due_query(kept, clock).limit(limit + 1)
    if tx.dialect == "postgresql":
        query = query.with_for_update(skip_locked=True)
    states = list(tx.session.scalars(query))
    more = len(states) > limit
    rows: dict[int, TableRow | None] = {}
    rules: dict[int, tuple[SetRule, int] | None] = {}
    dones: list[int] = []
    lates: list[int] = []
    for state in states[:limit]:
        if state.table_id not in rows:
            rows[state.table_id] = tx.session.get(TableRow, state.table_id)
            table_row = rows[state.table_id]
            rules[state.table_id] = None if table_row is None else current_rule(table_row)
        table_row, found = rows[state.table_id], rules[state.table_id]
        if table_row is None or found is None:
            state.due_at = None  # the rule was removed: nothing is due any more
            continue
        rule, version = found
        done_ids, late_ids = due_verdicts(tx, table_row, rule, version, state, clock)
        dones += done_ids
        lates += late_ids
    tx.session.flush()
    return DuePass(len(states[:limit]), tuple(dones), tuple(lates), frozenset(lost), more)
