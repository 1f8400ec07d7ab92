"""Completeness: the done of a set, derived from its table's rule, exactly once per
generation (docs/completeness.md; invariant 11 of docs/architecture.md).

Every change to partitions is announced through :mod:`hcat_notify.store.announce`, which
notes the partitions it touched (:func:`touch`) when their table has a rule. Before the
transaction commits (:meth:`Tx.before_commit`), each touched set is settled: its state
row is locked (``SELECT … FOR UPDATE`` on PostgreSQL, a new set's row first created with
``INSERT … ON CONFLICT DO NOTHING``; SQLite's writer lock serialises already), what is
there is compared with what the rule expects, and the done (or ``SET_REOPENED``) is
written in the same transaction. The verdict reads no partitions: the set's row keeps
its counts (partitions under it, expected parts there), which every write moves under
the lock (:func:`touch`'s delta); a row created, or counted under another rule
version, is counted afresh once. The timed pass (:mod:`hcat_notify.store.set_timed`) gives the
verdicts that need a clock (:func:`due_verdicts`): quiet periods and deadlines.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, cast

from sqlalchemy import (
    Connection,
    Table,
    select,
)

from hcat_notify.model.completeness import (
    DoneReason,
    OnDeadline,
    SetRule,
    SetState,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.set_events import SetVerdict, build_set_event
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.driver import Statement, first_rows, row_count
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.outbox import add_outbox_rows
from hcat_notify.store.records import TableInfo, info_of
from hcat_notify.store.retention import add_mark_set_done
from hcat_notify.store.set_assess import Assessment, assess, expected_of
from hcat_notify.store.set_counts import (
    Change,
    adopt,
    count_present,
    counting_of,
    keep_counts,
    lock_state,
    move_values,
)
from hcat_notify.store.set_rules import current_rule
from hcat_notify.store.set_sql import (
    Moved,
    create_statement,
    mark_statement,
    move_statement,
    moved,
    short_statement,
    under_params,
)
from hcat_notify.store.tx import Tx

__all__ = [
    "count_ahead",
    "due_verdicts",
    "lock_state",
    "mark_set_done",
    "reevaluate",
    "set_of",
    "settle",
    "settle_set",
    "touch",
]

logger = logging.getLogger(__name__)

_PENDING = "completeness"
"""The key of :attr:`Tx.pending` under which touched partitions wait for the commit."""

_ROWS = "completeness.rows"
"""The key of :attr:`Tx.pending` of the table rows :func:`touch` was given, by name."""

_DONES = "completeness.dones"
"""The key of :attr:`Tx.pending` listing the MARK_SET_DONE events rules wrote."""

_AHEAD = "completeness.ahead"
"""The key of :attr:`Tx.pending` of the sets :func:`count_ahead` counted: by (table,
set path), the rule version, the changes counted and the row as the counting write
left it (None: no current row, nothing counted)."""

_STATES = cast(Table, SetStateRow.__table__)

_DONE = SetState.DONE.value  # read on every write: an enum member's value costs more


def set_of(rule: SetRule, spec: PartitionSpec) -> PartitionSpec:
    """The set (the rule's leading keys) a partition's full spec belongs to."""
    return PartitionSpec(spec.items[: len(rule.set_keys)])


def touch(
    tx: Tx,
    info: TableInfo,
    specs: Iterable[PartitionSpec],
    *,
    delta: int,
    row: TableRow | None = None,
) -> None:
    """Note partitions (full specs) that ``tx`` adds (``delta`` 1), drops (-1) or
    changes in place (0): their sets are settled before it commits (nothing to do for a
    table without a rule). ``row``: the table's row, as the caller has it."""
    if info.rule_version is None:
        return
    touched: dict[TableName, list[tuple[PartitionSpec, int]]] = tx.pending.setdefault(_PENDING, {})
    touched.setdefault(info.name, []).extend((spec, delta) for spec in specs)
    rows: dict[TableName, TableRow] = tx.pending.setdefault(_ROWS, {})
    if row is not None:
        rows[info.name] = row
    else:
        rows.pop(info.name, None)  # found by name at commit
    tx.before_commit(_settle)


def _below(spec: PartitionSpec, depth: int) -> str:
    """The path of a partition below its set of ``depth`` keys (escaped values hold no
    ``/``)."""
    return spec.to_path().split("/", depth)[-1]


def _take_touched(tx: Tx, name: TableName, rule: SetRule, spec: PartitionSpec) -> list[Change]:
    """The changes ``tx`` made under the set ``spec``, taken (a done by hand in the same
    transaction covers them; the caller counts them)."""
    touched: dict[TableName, list[tuple[PartitionSpec, int]]] = tx.pending.get(_PENDING, {})
    noted = touched.get(name)
    if not noted:
        return []
    depth = len(rule.set_keys)
    taken = [(_below(item, depth), delta) for item, delta in noted if set_of(rule, item) == spec]
    touched[name] = [(item, delta) for item, delta in noted if set_of(rule, item) != spec]
    ahead = tx.pending.get(_AHEAD)
    if not ahead:
        return taken
    # the set's row, loaded afresh under its lock, has the changes counted ahead
    return _not_counted(ahead, name, spec.to_path(), None, taken)[0]


def _loaded_row(tx: Tx, name: TableName) -> TableRow:
    """The table's row: the one the write that touched it named (:func:`touch`), else
    the one this transaction loaded already (every write reads it first), else read
    now."""
    rows: dict[TableName, TableRow] | None = tx.pending.get(_ROWS)
    row = rows.get(name) if rows else None
    if row is not None:
        return row
    for item in tx.session.identity_map.values():
        if isinstance(item, TableRow) and (item.db_name, item.table_name) == (
            name.db,
            name.table,
        ):
            return item
    return tx.table_row(name)


def settle(tx: Tx) -> list[int]:
    """Settle now the sets ``tx`` touched so far (else they are settled when it
    commits); the MARK_SET_DONE events their rules wrote, in order."""
    dones: list[int] = tx.pending.setdefault(_DONES, [])
    before = len(dones)
    _settle(tx)
    return dones[before:]


def _settle(tx: Tx) -> None:
    touched: dict[TableName, list[tuple[PartitionSpec, int]]] = tx.pending.pop(_PENDING, {})
    for name in sorted(touched, key=str) if len(touched) > 1 else list(touched):
        if not touched[name]:
            continue
        row = _loaded_row(tx, name)
        found = current_rule(row)
        if found is None:
            continue
        rule, version = found
        clock: float | None = None
        connection = tx.connection()
        dialect = connection.dialect
        ruled = _Ruled(tx, connection, row, rule, version)
        counting = counting_of(rule)
        countable = counting.countable and dialect.update_returning
        short = countable and dialect.name == "sqlite"
        ahead = tx.pending.get(_AHEAD)
        for prefix, (first, changes) in _by_set(touched[name], len(rule.set_keys)):
            counted: Moved | _Unmoved | None = None
            if ahead:
                changes, counted = _not_counted(ahead, name, prefix, version, changes)
            if countable and (changes or counted is None):
                # one counting write, unless count_ahead made it and nothing is left
                canonical = _canonical(rule, first, prefix)
                values = move_values(row.id, counting, version, canonical, changes)
                parts = counting.expected is not None
                if (
                    short
                    and changes
                    and counted is None
                    and row_count(connection, short_statement(dialect, parts, values)) == 1
                ):
                    continue  # counted, still incomplete, nothing due: judged
                statement = move_statement(dialect, parts, values)
                counted = moved(first_rows(connection, [statement])[0])
                counted = _Unmoved.NO_CURRENT_ROW if counted is None else counted
            if counted is _Unmoved.NO_CURRENT_ROW and countable and counting.untimed:
                counted = _create(ruled, first, prefix, changes)
            if isinstance(counted, Moved):
                _judge_moved(ruled, first, prefix, counted)
                continue
            clock = tx.clock() if clock is None else clock
            spec = set_of(rule, first)
            likely_new = counted is _Unmoved.NO_CURRENT_ROW
            settle_set(tx, row, rule, version, spec, clock, changes=changes, likely_new=likely_new)


def _by_set(
    noted: Sequence[tuple[PartitionSpec, int]], depth: int
) -> list[tuple[str, tuple[PartitionSpec, list[Change]]]]:
    """The changes ``noted`` (full specs) by set: (the set's path, (a partition of it,
    its changes)), in path order: one lock order for every writer, no deadlock."""
    sets: dict[str, tuple[PartitionSpec, list[Change]]] = {}
    for spec, delta in noted:
        if depth == 1:
            prefix, _, below = spec.to_path().partition("/")
        else:
            pieces = spec.to_path().split("/", depth)
            below = pieces.pop()
            prefix = "/".join(pieces)
        if len(noted) == 1:  # one change (``partitions add``): one set
            return [(prefix, (spec, [(below, delta)]))]
        found = sets.get(prefix)
        if found is None:
            found = sets[prefix] = (spec, [])
        found[1].append((below, delta))
    return sorted(sets.items())


def _complete(
    tx: Tx, table_id: int, rule: SetRule, spec: PartitionSpec, state: SetStateRow
) -> tuple[bool, Assessment | None]:
    """Whether the set is complete, by its row's counts; a rule whose expected parts are
    another set's (``like_previous``) reads the partitions (the assessment, then)."""
    expected = expected_of(rule)
    if expected is not None:
        return bool(expected) and state.expected_present == len(expected), None
    if rule.min_partitions is not None:
        return state.part_count >= rule.min_partitions, None
    found = assess(tx, table_id, rule, spec)
    return found.complete, found


def _record_done(state: SetStateRow, event_id: int, reason: DoneReason, clock: float) -> None:
    state.state = _DONE
    state.done_at = clock
    state.done_reason = reason.value
    state.done_event_id = event_id
    state.due_at = None


def _add_done(
    tx: Tx,
    row: TableRow,
    spec: PartitionSpec,
    *,
    generation: int,
    reason: DoneReason,
    rule_version: int | None,
) -> int:
    """A rule's MARK_SET_DONE (and its retention row); its event id."""
    info = info_of(row)
    event_id, _ = add_mark_set_done(
        tx,
        row,
        info,
        spec,
        generation=generation,
        reason=reason.value,
        rule_version=rule_version,
    )
    tx.pending.setdefault(_DONES, []).append(event_id)
    logger.info(
        "set %s of %s done (generation %d, %s) as event %d",
        spec,
        info.name,
        generation,
        reason.value,
        event_id,
    )
    return event_id


def _write_done(
    tx: Tx, row: TableRow, spec: PartitionSpec, state: SetStateRow, reason: DoneReason, clock: float
) -> int:
    event_id = _add_done(
        tx, row, spec, generation=state.generation, reason=reason, rule_version=state.rule_version
    )
    _record_done(state, event_id, reason, clock)
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


class _Times(Protocol):
    """What of a set's row says when it is due: the row, or a write's ``RETURNING``."""

    @property
    def state(self) -> str: ...
    @property
    def late_emitted(self) -> bool: ...
    @property
    def done_at(self) -> float | None: ...
    @property
    def deadline_at(self) -> float | None: ...
    @property
    def last_change_at(self) -> float | None: ...


def _deadline_pending(state: _Times) -> bool:
    """Whether the set still awaits its deadline's verdict: one, for a set never done."""
    return not state.late_emitted and state.done_at is None and state.deadline_at is not None


def _next_due(rule: SetRule, state: _Times, complete: bool) -> float | None:
    """When the timed pass must look at the set next (None: only a change can move it)."""
    if state.state == _DONE:
        return None
    times: list[float] = []
    if complete and rule.quiet_seconds and state.last_change_at is not None:
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
    changes: Sequence[Change] | None,
    likely_new: bool = False,
) -> list[int]:
    """Settle one set under its lock: count this transaction's ``changes`` under it
    (None: no change, the set is only judged again), note a change (a new generation
    after a done), then write the done at once when the set is complete (without a quiet
    period), or a ``SET_REOPENED`` when a done set is no longer complete. The event ids
    written. ``likely_new``: the set probably has no row yet (:func:`lock_state`)."""
    state, created = lock_state(tx, row, rule, version, spec, clock, likely_new=likely_new)
    keep_counts(tx, row.id, rule, version, spec, state, created=created, changes=changes or ())
    was_done = state.state == _DONE
    if changes is not None:
        state.last_change_at = clock
        if was_done:
            state.generation += 1
            state.state = SetState.OPEN.value
    complete, found = _complete(tx, row.id, rule, spec, state)
    written: list[int] = []
    if state.state != _DONE:
        if complete and not rule.quiet_seconds:
            written.append(_write_done(tx, row, spec, state, _done_reason(state), clock))
        elif not complete and was_done:
            state.state = SetState.REOPENED.value
            found = found or assess(tx, row.id, rule, spec)  # what is missing
            written.append(_write_verdict(tx, row, EventType.SET_REOPENED, spec, state, found))
    state.due_at = _next_due(rule, state, complete)
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
    state, created = lock_state(tx, row, rule, version, ordered, clock)
    changes = _take_touched(tx, info.name, rule, ordered)
    keep_counts(tx, row.id, rule, version, ordered, state, created=created, changes=changes)
    if changes:
        state.last_change_at = clock
        if state.state == _DONE:
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
    dones: list[int] = []
    lates: list[int] = []
    if state.state != _DONE:
        if state.rule_version != version:
            adopt(rule, version, spec, state)
        found = assess(tx, row.id, rule, spec)
        count_present(state, rule, spec, found.present)  # read anyway, under the lock
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
        state.due_at = _next_due(rule, state, found.complete)
    else:
        state.due_at = None
    return dones, lates


class _Unmoved(enum.Enum):
    """Why a counting write did not count a set's changes."""

    NO_CURRENT_ROW = "no current row"  # none yet (usually), done, or another version
    THERE = "there"  # the set's row is there now, to be locked and judged


def _canonical(rule: SetRule, first: PartitionSpec, prefix: str) -> str:
    """The canonical form (keys sorted) of the set whose path is ``prefix`` (``first``,
    a partition of it): with one key, its path."""
    return prefix if len(rule.set_keys) == 1 else set_of(rule, first).canonical()


class _Ruled(NamedTuple):
    """A table whose touched sets a transaction settles: the transaction, its
    connection, the table's row, its rule in force and the rule's version."""

    tx: Tx
    connection: Connection
    row: TableRow
    rule: SetRule
    version: int


def _create(
    ruled: _Ruled, first: PartitionSpec, prefix: str, changes: Sequence[Change]
) -> Moved | _Unmoved:
    """A new set's row (``prefix``, its path; ``ruled``: a rule without times and its
    version), created and counted in one statement; it as created, or ``THERE`` when it
    was there already or must be counted afresh (a set that held partitions before this
    write: left to :func:`settle_set`)."""
    tx, connection, row, rule, version = ruled
    expected = expected_of(rule)
    parts = {part for part, _ in changes}
    only_added = len(parts) == len(changes) and all(delta == 1 for _, delta in changes)
    values: dict[str, object] = {
        "b_set": _canonical(rule, first, prefix),
        "b_bucket": tx.bucket_of(row.topic),
        "b_version": version,
        "b_added": len(parts) if only_added and parts else -1,
        "b_expected": 0 if expected is None else len(parts & expected),
        **under_params(connection.dialect.name, row.id, prefix + "/"),
    }
    statement = create_statement(connection.dialect, expected is not None, values)
    created = moved(first_rows(connection, [statement])[0])
    if created is None or (expected is not None and created.expected_present is None):
        return _Unmoved.THERE  # counted afresh, under its lock
    return created


def count_ahead(
    tx: Tx,
    row: TableRow,
    name: TableName,
    specs: Sequence[PartitionSpec],
    along: Statement | None = None,
) -> object:
    """Count now, on their sets' rows, the new partitions ``specs`` (full specs) that
    ``tx`` adds to the table ``name`` (``row``), with ``along`` (a driver statement: the
    write's own check) in the same round trip where the driver pipelines (PostgreSQL);
    ``along``'s first row (None without it). Each counting write also locks its set's
    row; the sets are judged when ``tx`` commits, as every touched set (:func:`touch`),
    without counting these partitions again. For a transaction that adds partitions
    and nothing else (``partitions add``): a set's done must follow the write's
    ADD_PARTITION events, and a done by hand in it would count them again."""
    found = current_rule(row)
    connection = tx.connection()
    sets: list[tuple[str, list[Change]]] = []
    statements = [] if along is None else [along]
    if (
        found is not None
        and counting_of(found[0]).countable
        and connection.dialect.update_returning
    ):
        rule, version = found
        for prefix, (first, changes) in _by_set([(s, 1) for s in specs], len(rule.set_keys)):
            sets.append((prefix, changes))
            counting = counting_of(rule)
            values = move_values(
                row.id, counting, version, _canonical(rule, first, prefix), changes
            )
            parts = counting.expected is not None
            statements.append(move_statement(connection.dialect, parts, values))
    tx.session.flush()
    rows = first_rows(connection, statements)
    if sets:
        ahead = tx.pending.setdefault(_AHEAD, {})
        for (prefix, changes), counted in zip(sets, rows[len(rows) - len(sets) :], strict=True):
            ahead[(name, prefix)] = (version, changes, moved(counted))
    return None if along is None else rows[0]


_Ahead = dict[tuple[TableName, str], tuple[int, list[Change], Moved | None]]
"""What :func:`count_ahead` counted (under :data:`_AHEAD`)."""


def _not_counted(
    ahead: _Ahead, name: TableName, prefix: str, version: int | None, changes: list[Change]
) -> tuple[list[Change], Moved | _Unmoved | None]:
    """``changes`` under a set less those :func:`count_ahead` counted (taken from
    ``ahead``), and the row as its counting write left it (``NO_CURRENT_ROW``: it counted
    nothing; None: it did not try; ``version``: only under this rule version)."""
    counted = ahead.pop((name, prefix), None)
    if counted is None or version not in (None, counted[0]):
        return changes, None
    if counted[2] is None:
        return changes, _Unmoved.NO_CURRENT_ROW
    if changes == counted[1]:
        return [], counted[2]
    rest = list(changes)
    for change in counted[1]:
        if change in rest:
            rest.remove(change)
    return rest, counted[2]


def _judge_moved(ruled: _Ruled, first: PartitionSpec, prefix: str, counted: Moved) -> list[int]:
    """The verdict on a set by its row as the counting write left it (locked; ``ruled``:
    the rule and its version): its done when complete (without a quiet period), else its
    due time kept; the events written."""
    tx, connection, row, rule, version = ruled
    expected = expected_of(rule)
    if expected is not None:
        complete = bool(expected) and counted.expected_present == len(expected)
    else:
        complete = rule.min_partitions is not None and counted.part_count >= rule.min_partitions
    keys = {"b_table": row.id, "b_set": _canonical(rule, first, prefix)}
    if complete and not rule.quiet_seconds:  # the row is locked: driver statements
        reason = DoneReason.RULE if counted.generation == 1 else DoneReason.CHANGED
        spec = set_of(rule, first)
        event_id = _add_done(
            tx, row, spec, generation=counted.generation, reason=reason, rule_version=version
        )
        done = {"b_done_at": counted.last_change_at, "b_reason": reason.value, "b_event": event_id}
        row_count(connection, mark_statement(connection.dialect, True, {**keys, **done}))
        return [event_id]
    due = _next_due(rule, counted, complete)
    if due != counted.due_at:
        row_count(connection, mark_statement(connection.dialect, False, {**keys, "b_due": due}))
    return []


def reevaluate(tx: Tx, row: TableRow, limit: Sequence[str] | None = None) -> list[int]:
    """Settle every set of the table not done (after a rule change), without counting
    it as a change; the event ids written."""
    found = current_rule(row)
    if found is None:
        return []
    rule, version = found
    keys = info_of(row).partition_keys
    query = select(SetStateRow.set_spec).where(
        SetStateRow.table_id == row.id, SetStateRow.state != _DONE
    )
    if limit is not None:
        query = query.where(SetStateRow.set_spec.in_(list(limit)))
    clock = tx.clock()
    written: list[int] = []
    for canonical in sorted(tx.session.scalars(query)):
        spec = PartitionSpec.parse(canonical).for_table(keys, partial=True)
        written += settle_set(tx, row, rule, version, spec, clock, changes=None)
    return written
