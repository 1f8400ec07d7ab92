"""Completeness: the done of a set, derived from its table's rule, exactly once per
generation (docs/completeness.md; invariant 11 of docs/architecture.md).

Every change to partitions is announced through :mod:`hcat_notify.store.announce`, which
notes the partitions it touched (:func:`touch`) when their table has a rule. Before the
transaction commits (:meth:`Tx.before_commit`), each touched set is settled: its state
row is locked (``SELECT … FOR UPDATE`` on PostgreSQL, a new set's row first created with
``INSERT … ON CONFLICT DO NOTHING``; SQLite's writer lock serialises already), what is
there is compared with what the rule expects, and the done (or ``SET_REOPENED``) is
written in the same transaction. The timed pass (:func:`evaluate_due`) gives the
verdicts that need a clock: quiet periods and deadlines, fenced by the bucket's epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Select, select
from sqlalchemy.dialects import postgresql, sqlite

from hcat_notify.model.completeness import (
    DoneReason,
    OnDeadline,
    SetRule,
    SetState,
    deadline_at,
    expected_parts,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.set_events import SetVerdict, build_set_event
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import PartitionRow, RelayBucketRow, SetStateRow, TableRow
from hcat_notify.store.outbox import add_outbox_rows
from hcat_notify.store.records import TableInfo, info_of
from hcat_notify.store.retention import add_mark_set_done
from hcat_notify.store.set_records import DuePass
from hcat_notify.store.set_rules import current_rule
from hcat_notify.store.tx import Tx

__all__ = [
    "Assessment",
    "assess",
    "due_verdicts",
    "evaluate_due",
    "lock_state",
    "mark_set_done",
    "nothing_due",
    "reevaluate",
    "set_of",
    "settle_set",
    "touch",
]

logger = logging.getLogger(__name__)

_PENDING = "completeness"
"""The key of :attr:`Tx.pending` under which touched partitions wait for the commit."""


@dataclass(frozen=True)
class Assessment:
    """A set's parts against its rule."""

    expected: int | None
    present: tuple[str, ...]
    """Full path forms, path order."""
    missing: tuple[str, ...]
    complete: bool


def set_of(rule: SetRule, spec: PartitionSpec) -> PartitionSpec:
    """The set (the rule's leading keys) a partition's full spec belongs to."""
    return PartitionSpec(spec.items[: len(rule.set_keys)])


def _under(tx: Tx, table_id: int, prefix: str) -> list[str]:
    """The paths of the table's partitions under ``prefix`` (``k=v/``), in path order."""
    return sorted(
        tx.session.scalars(
            select(PartitionRow.path_spec).where(
                PartitionRow.table_id == table_id,
                PartitionRow.path_spec.startswith(prefix, autoescape=True),
            )
        )
    )


def _previous_set(tx: Tx, table_id: int, prefix: str, depth: int) -> str | None:
    """The path prefix of the set before ``prefix`` in path order (the database's, as
    :func:`hcat_notify.store.partitions.list_partitions` orders), or None."""
    last = tx.session.scalars(
        select(PartitionRow.path_spec)
        .where(PartitionRow.table_id == table_id, PartitionRow.path_spec < prefix)
        .order_by(PartitionRow.path_spec.desc())
        .limit(1)
    ).first()
    if last is None:
        return None
    return "/".join(last.split("/")[:depth]) + "/"


def assess(tx: Tx, table_id: int, rule: SetRule, spec: PartitionSpec) -> Assessment:
    """What the set ``spec`` (keys in the table's order) has against ``rule``."""
    prefix = spec.to_path() + "/"
    present = tuple(_under(tx, table_id, prefix))
    have = {path[len(prefix) :] for path in present}
    expected = expected_parts(rule)
    if expected is None and rule.like_previous:
        previous = _previous_set(tx, table_id, prefix, len(rule.set_keys))
        if previous is not None:
            expected = tuple(path[len(previous) :] for path in _under(tx, table_id, previous))
    if expected is not None:
        missing = tuple(prefix + part for part in expected if part not in have)
        complete = bool(expected) and not missing
        return Assessment(len(expected), present, missing, complete)
    minimum = rule.min_partitions
    complete = minimum is not None and len(present) >= minimum
    return Assessment(minimum, present, (), complete)


def touch(tx: Tx, info: TableInfo, specs: Iterable[PartitionSpec]) -> None:
    """Note partitions that ``tx`` adds, changes or drops: their sets are settled before
    it commits (nothing to do for a table without a rule)."""
    if info.rule_version is None:
        return
    touched: dict[TableName, list[PartitionSpec]] = tx.pending.setdefault(_PENDING, {})
    touched.setdefault(info.name, []).extend(specs)
    tx.before_commit(_settle)


def _take_touched(tx: Tx, name: TableName, rule: SetRule, spec: PartitionSpec) -> bool:
    """Whether ``tx`` touched the set ``spec``; its touches are taken (a done by hand in
    the same transaction covers them)."""
    touched: dict[TableName, list[PartitionSpec]] = tx.pending.get(_PENDING, {})
    specs = touched.get(name)
    if not specs:
        return False
    kept = [item for item in specs if set_of(rule, item) != spec]
    touched[name] = kept
    return len(kept) != len(specs)


def _loaded_row(tx: Tx, name: TableName) -> TableRow:
    """The table's row: the one this transaction loaded already (every write reads it
    first), else read now."""
    for item in tx.session.identity_map.values():
        if isinstance(item, TableRow) and (item.db_name, item.table_name) == (
            name.db,
            name.table,
        ):
            return item
    return tx.table_row(name)


def _settle(tx: Tx) -> None:
    touched: dict[TableName, list[PartitionSpec]] = tx.pending.pop(_PENDING, {})
    for name in sorted(touched, key=str):
        if not touched[name]:
            continue
        row = _loaded_row(tx, name)
        found = current_rule(row)
        if found is None:
            continue
        rule, version = found
        sets = {set_of(rule, spec).to_path(): set_of(rule, spec) for spec in touched[name]}
        clock = tx.clock()
        for path in sorted(sets):  # one lock order for every writer: no deadlock
            settle_set(tx, row, rule, version, sets[path], clock, changed=True)


def _state_query(table_id: int, canonical: str) -> Select[SetStateRow]:
    return select(SetStateRow).where(
        SetStateRow.table_id == table_id, SetStateRow.set_spec == canonical
    )


def lock_state(
    tx: Tx,
    row: TableRow,
    rule: SetRule,
    version: int,
    spec: PartitionSpec,
    clock: float,
) -> SetStateRow:
    """The state row of the set ``spec``, locked until ``tx`` ends (PostgreSQL), created
    (generation 1, open) if it has none yet: ``SELECT … FOR UPDATE``, and only when there
    is no row, ``INSERT … ON CONFLICT DO NOTHING`` and the ``SELECT`` again."""
    canonical = spec.canonical()
    query = _state_query(row.id, canonical).execution_options(populate_existing=True)
    if tx.dialect == "postgresql":
        query = query.with_for_update()
    found = tx.session.execute(query).scalar_one_or_none()
    if found is not None:  # the usual case: one statement
        return found
    dialect = postgresql if tx.dialect == "postgresql" else sqlite
    tx.session.execute(
        dialect.insert(SetStateRow)
        .values(
            table_id=row.id,
            set_spec=canonical,
            bucket=tx.bucket_of(info_of(row).topic),
            generation=1,
            state=SetState.OPEN.value,
            rule_version=version,
            first_part_at=clock,
            last_change_at=clock,
            late_emitted=False,
            deadline_at=deadline_at(rule, spec, clock),
        )
        .on_conflict_do_nothing(index_elements=["table_id", "set_spec"])
    )
    # A writer that created it meanwhile has committed (the insert waited for it): the
    # lock is taken on its row.
    return tx.session.execute(query).scalar_one()


def _record_done(state: SetStateRow, event_id: int, reason: DoneReason, clock: float) -> None:
    state.state = SetState.DONE.value
    state.done_at = clock
    state.done_reason = reason.value
    state.done_event_id = event_id
    state.due_at = None


def _write_done(
    tx: Tx, row: TableRow, spec: PartitionSpec, state: SetStateRow, reason: DoneReason, clock: float
) -> int:
    event_id, _ = add_mark_set_done(
        tx,
        row,
        info_of(row),
        spec,
        generation=state.generation,
        reason=reason.value,
        rule_version=state.rule_version,
    )
    _record_done(state, event_id, reason, clock)
    logger.info(
        "set %s of %s done (generation %d, %s) as event %d",
        spec,
        info_of(row).name,
        state.generation,
        reason.value,
        event_id,
    )
    return event_id


def _write_verdict(
    tx: Tx,
    row: TableRow,
    event_type: EventType,
    spec: PartitionSpec,
    state: SetStateRow,
    found: Assessment,
) -> int:
    info = info_of(row)
    (event_id,) = tx.allocate_event_ids(1)
    verdict = SetVerdict(
        spec=spec,
        generation=state.generation,
        rule_version=state.rule_version,
        expected=found.expected,
        present=len(found.present),
        missing=found.missing,
        deadline=state.deadline_at,
    )
    message = build_set_event(
        event_type,
        verdict,
        event_id=event_id,
        table=info.name,
        topic=info.topic,
        timestamp=int(tx.now.timestamp()),
    )
    add_outbox_rows(tx, [message], info.name)
    logger.info("set %s of %s: %s as event %d", spec, info.name, event_type.value, event_id)
    return event_id


def _done_reason(state: SetStateRow) -> DoneReason:
    return DoneReason.RULE if state.generation == 1 else DoneReason.CHANGED


def _deadline_pending(state: SetStateRow) -> bool:
    """Whether the set still awaits its deadline's verdict: one, for a set never done."""
    return not state.late_emitted and state.done_at is None and state.deadline_at is not None


def _next_due(rule: SetRule, state: SetStateRow, found: Assessment) -> float | None:
    """When the timed pass must look at the set next (None: only a change can move it)."""
    if state.state == SetState.DONE.value:
        return None
    times: list[float] = []
    if found.complete and rule.quiet_seconds and state.last_change_at is not None:
        times.append(state.last_change_at + rule.quiet_seconds)
    if _deadline_pending(state) and state.deadline_at is not None:
        times.append(state.deadline_at)
    return min(times) if times else None


def settle_set(
    tx: Tx,
    row: TableRow,
    rule: SetRule,
    version: int,
    spec: PartitionSpec,
    clock: float,
    *,
    changed: bool,
) -> list[int]:
    """Settle one set under its lock: note a change (a new generation after a done),
    then write the done at once when the set is complete (without a quiet period), or a
    ``SET_REOPENED`` when a done set is no longer complete. The event ids written."""
    state = lock_state(tx, row, rule, version, spec, clock)
    if state.rule_version != version:
        state.rule_version = version
        state.deadline_at = deadline_at(rule, spec, state.first_part_at)
    was_done = state.state == SetState.DONE.value
    if changed:
        state.last_change_at = clock
        if was_done:
            state.generation += 1
            state.state = SetState.OPEN.value
    found = assess(tx, row.id, rule, spec)
    written: list[int] = []
    if state.state != SetState.DONE.value:
        if found.complete and not rule.quiet_seconds:
            written.append(_write_done(tx, row, spec, state, _done_reason(state), clock))
        elif not found.complete and was_done:
            state.state = SetState.REOPENED.value
            written.append(_write_verdict(tx, row, EventType.SET_REOPENED, spec, state, found))
    state.due_at = _next_due(rule, state, found)
    tx.session.flush()
    return written


def mark_set_done(
    tx: Tx, row: TableRow, info: TableInfo, spec: PartitionSpec | Mapping[str, str | None]
) -> tuple[int, PartitionSpec]:
    """A MARK_SET_DONE sent by hand (reason ``writer``), in ``tx``; (event id, spec as
    recorded, keys sorted). On a table with a rule, a done of exactly one set counts: the
    set is done at its current generation (a new one if this transaction changed it after
    its last done) and the rule sends no other done for that generation.

    Raises:
        UnknownPartitionKeyError, InvalidSpecError: ``spec`` is not a done of the table.
    """
    canonical = info.done_spec(spec)
    found = current_rule(row) if info.rule_version is not None else None
    if found is None or sorted(canonical.keys) != sorted(found[0].set_keys):
        return add_mark_set_done(tx, row, info, canonical)
    rule, version = found
    ordered = info.spec(canonical, partial=True)
    clock = tx.clock()
    state = lock_state(tx, row, rule, version, ordered, clock)
    if _take_touched(tx, info.name, rule, ordered):
        state.last_change_at = clock
        if state.state == SetState.DONE.value:
            state.generation += 1
    event_id, recorded = add_mark_set_done(
        tx, row, info, canonical, generation=state.generation, reason=DoneReason.WRITER.value
    )
    _record_done(state, event_id, DoneReason.WRITER, clock)
    tx.session.flush()
    return event_id, recorded


def deadline_verdict(
    tx: Tx,
    row: TableRow,
    rule: SetRule,
    spec: PartitionSpec,
    state: SetStateRow,
    found: Assessment,
    clock: float,
) -> tuple[list[int], list[int]]:
    """The verdict on a set past its deadline, incomplete (once): ``SET_LATE``, a
    ``partial`` done, or nothing, as the rule says; (dones, lates) written."""
    state.late_emitted = True
    if rule.on_deadline is OnDeadline.DONE:
        return [_write_done(tx, row, spec, state, DoneReason.PARTIAL, clock)], []
    state.state = SetState.LATE.value
    if rule.on_deadline is OnDeadline.LATE:
        return [], [_write_verdict(tx, row, EventType.SET_LATE, spec, state, found)]
    return [], []


def due_verdicts(
    tx: Tx, row: TableRow, rule: SetRule, version: int, state: SetStateRow, clock: float
) -> tuple[list[int], list[int]]:
    """The timed verdicts on one due set (its row locked by the caller): its done after
    a quiet period, or its deadline's verdict; (dones, lates) written."""
    keys = info_of(row).partition_keys
    spec = PartitionSpec.parse(state.set_spec).for_table(keys, partial=True)
    if state.rule_version != version:
        state.rule_version = version
        state.deadline_at = deadline_at(rule, spec, state.first_part_at)
    dones: list[int] = []
    lates: list[int] = []
    if state.state != SetState.DONE.value:
        found = assess(tx, row.id, rule, spec)
        quiet_until = (state.last_change_at or clock) + (rule.quiet_seconds or 0)
        if found.complete and quiet_until <= clock:
            dones.append(_write_done(tx, row, spec, state, _done_reason(state), clock))
        elif (
            not found.complete
            and _deadline_pending(state)
            and state.deadline_at is not None
            and state.deadline_at <= clock
        ):
            dones, lates = deadline_verdict(tx, row, rule, spec, state, found, clock)
        state.due_at = _next_due(rule, state, found)
    else:
        state.due_at = None
    return dones, lates


def reevaluate(tx: Tx, row: TableRow, limit: Sequence[str] | None = None) -> list[int]:
    """Settle every set of the table not done (after a rule change), without counting
    it as a change; the event ids written."""
    found = current_rule(row)
    if found is None:
        return []
    rule, version = found
    keys = info_of(row).partition_keys
    query = select(SetStateRow.set_spec).where(
        SetStateRow.table_id == row.id, SetStateRow.state != SetState.DONE.value
    )
    if limit is not None:
        query = query.where(SetStateRow.set_spec.in_(list(limit)))
    clock = tx.clock()
    written: list[int] = []
    for canonical in sorted(tx.session.scalars(query)):
        spec = PartitionSpec.parse(canonical).for_table(keys, partial=True)
        written += settle_set(tx, row, rule, version, spec, clock, changed=False)
    return written


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
