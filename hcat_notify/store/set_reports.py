"""Where a table's sets stand, read for people and sensors (``hcat-notify
completeness``, the API's sets, the status grid; docs/completeness.md)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.completeness import SetRule, SetState
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.records import info_of
from hcat_notify.store.set_assess import assess
from hcat_notify.store.set_records import RuleRecord, SetReport, epoch_time
from hcat_notify.store.set_rules import rule_record
from hcat_notify.store.tx import Tx

__all__ = ["list_sets", "set_report", "set_spec_of"]

SpecLike = PartitionSpec | Mapping[str, str | None]

MAX_LISTED_SETS = 1000


def set_spec_of(row: TableRow, rule: SetRule, spec: SpecLike) -> PartitionSpec:
    """``spec`` as a set of the rule (exactly its set keys), keys in the table's order.

    Raises:
        InvalidInputError: not exactly the rule's set keys (or not the table's keys).
    """
    info = info_of(row)
    given = info.spec(spec, partial=True)
    if given.keys != rule.set_keys:
        raise InvalidInputError(
            f"{given} is not a set of {info.name}: a set gives exactly {', '.join(rule.set_keys)}"
        )
    return given


def _report(
    tx: Tx,
    row: TableRow,
    record: RuleRecord,
    spec: PartitionSpec,
    state: SetStateRow | None,
    clock: float,
) -> SetReport:
    assert record.rule is not None
    found = assess(tx, row.id, record.rule, spec)
    info = info_of(row)
    if state is None:
        return SetReport(
            table=info.name,
            spec=spec,
            rule=record,
            state=None,
            generation=1,
            expected=found.expected,
            present=found.present,
            missing=found.missing,
            complete=found.complete,
        )
    done = state.state == SetState.DONE.value
    done_generation = (
        state.generation if done else state.generation - 1 if state.done_at is not None else None
    )
    late_by = (
        clock - state.deadline_at
        if not done and state.deadline_at is not None and clock > state.deadline_at
        else None
    )
    quiet = record.rule.quiet_seconds
    quiet_until = (
        epoch_time(state.last_change_at + quiet)
        if quiet and not done and found.complete and state.last_change_at is not None
        else None
    )
    return SetReport(
        table=info.name,
        spec=spec,
        rule=record,
        state=SetState(state.state),
        generation=state.generation,
        expected=found.expected,
        present=found.present,
        missing=found.missing,
        complete=found.complete,
        done_generation=done_generation,
        done_reason=state.done_reason,
        done_at=epoch_time(state.done_at),
        done_event_id=state.done_event_id,
        deadline=epoch_time(state.deadline_at),
        late_by=late_by,
        late_emitted=state.late_emitted,
        first_part_at=epoch_time(state.first_part_at),
        last_change_at=epoch_time(state.last_change_at),
        quiet_until=quiet_until,
    )


def _rule_in_force(tx: Tx, row: TableRow) -> RuleRecord:
    record = rule_record(tx, row, row.rule_version) if row.rule_version is not None else None
    if record is None or record.rule is None:
        raise InvalidInputError(f"table {info_of(row).name} has no completeness rule")
    return record


def set_report(tx: Tx, row: TableRow, spec: SpecLike) -> SetReport:
    """Where the set ``spec`` stands.

    Raises:
        InvalidInputError: the table has no rule, or ``spec`` is not one of its sets.
    """
    record = _rule_in_force(tx, row)
    assert record.rule is not None
    wanted = set_spec_of(row, record.rule, spec)
    state = tx.session.scalars(
        select(SetStateRow).where(
            SetStateRow.table_id == row.id, SetStateRow.set_spec == wanted.canonical()
        )
    ).first()
    return _report(tx, row, record, wanted, state, tx.clock())


def list_sets(
    tx: Tx, row: TableRow, spec: SpecLike | None = None, *, limit: int = 100
) -> list[SetReport]:
    """The table's known sets (those a part arrived in since it has a rule), newest
    (last in path order) first, only those ``spec`` (a partial spec) covers.

    Raises:
        InvalidInputError: the table has no rule, a bad spec, or a limit out of 1..1000.
    """
    if not 1 <= limit <= MAX_LISTED_SETS:
        raise InvalidInputError(f"limit must be between 1 and {MAX_LISTED_SETS}")
    record = _rule_in_force(tx, row)
    assert record.rule is not None
    info = info_of(row)
    wanted = info.spec(spec, partial=True) if spec is not None else None
    query = select(SetStateRow).where(SetStateRow.table_id == row.id)
    if wanted is None and len(record.rule.set_keys) == 1:
        # one set key: the stored (sorted) form is the path form, so the newest sets are
        # the last in the database's order (as partitions are listed)
        query = query.order_by(SetStateRow.set_spec.desc()).limit(limit)
    states = tx.session.scalars(query).all()
    by_spec = []
    for state in states:
        set_spec = PartitionSpec.parse(state.set_spec).for_table(info.partition_keys, partial=True)
        if wanted is None or all(
            set_spec.as_dict().get(key, value) == value for key, value in wanted.items
        ):
            by_spec.append((set_spec.to_path(), set_spec, state))
    by_spec.sort(key=lambda item: item[0], reverse=True)
    clock = tx.clock()
    return [
        _report(tx, row, record, set_spec, state, clock) for _, set_spec, state in by_spec[:limit]
    ]
