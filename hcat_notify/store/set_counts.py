"""A set's counts on its row (partitions under it, expected parts there), kept exact
under the row's lock by every write that touches the set (docs/completeness.md): the
row locked (created for a new set), moved by a write's changes, or counted afresh from
the set's partitions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hcat_notify.model.completeness import SetRule, SetState, deadline_at
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.records import info_of
from hcat_notify.store.set_assess import expected_of, paths_under
from hcat_notify.store.set_sql import count_under, insert_state, state_query, under_params
from hcat_notify.store.tx import Tx

__all__ = [
    "Change",
    "Counting",
    "adopt",
    "count_present",
    "counting_of",
    "keep_counts",
    "lock_state",
    "move_values",
]

Change = tuple[str, int]
"""A change under a set: the part (its path below the set) and what it did to the
set's partitions: +1 added, -1 dropped, 0 changed in place (append, overwrite)."""


def lock_state(
    tx: Tx,
    row: TableRow,
    rule: SetRule,
    version: int,
    spec: PartitionSpec,
    clock: float,
    *,
    likely_new: bool = False,
) -> tuple[SetStateRow, bool]:
    """The state row of the set ``spec``, locked until ``tx`` ends (PostgreSQL), created
    (generation 1, open) if it has none yet: ``SELECT … FOR UPDATE``, and only when there
    is no row, ``INSERT … ON CONFLICT DO NOTHING`` and the ``SELECT`` again (``likely_new``:
    the ``INSERT`` first, then the ``SELECT``). Also whether this transaction created it
    (its counts are still to be made)."""
    canonical = spec.canonical()
    query = state_query(tx.dialect)
    keys = {"b_table": row.id, "b_set": canonical}
    if not likely_new:
        found = tx.session.execute(query, keys).scalar_one_or_none()
        if found is not None:  # the usual case: one statement
            return found, False
    created = tx.session.execute(
        insert_state(tx.dialect),
        {
            "table_id": row.id,
            "set_spec": canonical,
            "bucket": tx.bucket_of(info_of(row).topic),
            "generation": 1,
            "state": SetState.OPEN.value,
            "rule_version": version,
            "first_part_at": clock,
            "last_change_at": clock,
            "late_emitted": False,
            "deadline_at": deadline_at(rule, spec, clock),
            "part_count": 0,
        },
    )
    # A writer that created it meanwhile has committed (the insert waited for it): the
    # lock is taken on its row, whose counts that writer made.
    return tx.session.execute(query, keys).scalar_one(), bool(created.rowcount)  # type: ignore[attr-defined]


def count_present(
    state: SetStateRow, rule: SetRule, spec: PartitionSpec, present: Sequence[str]
) -> None:
    """Set the row's counts from the set's partitions ``present`` (full paths)."""
    expected = expected_of(rule)
    state.part_count = len(present)
    if expected is None:
        state.expected_present = None
    else:
        start = len(spec.to_path()) + 1
        state.expected_present = sum(1 for path in present if path[start:] in expected)


def _count_afresh(
    tx: Tx,
    table_id: int,
    rule: SetRule,
    spec: PartitionSpec,
    state: SetStateRow,
    changes: Sequence[Change],
) -> None:
    """Set the row's counts from the set's partitions, this transaction's included.
    When its ``changes`` are all additions of distinct parts and the set holds exactly
    that many partitions, those are all it holds (each is there): the counts follow from
    the changes and one ``count(*)``, without reading the partitions (a new set that one
    write fills, as a commit does)."""
    prefix = spec.to_path() + "/"
    parts = {part for part, _ in changes}
    if changes and len(parts) == len(changes) and all(delta == 1 for _, delta in changes):
        present = tx.session.execute(
            count_under(tx.dialect), under_params(tx.dialect, table_id, prefix)
        ).scalar_one()
        if present == len(parts):
            expected = expected_of(rule)
            state.part_count = present
            state.expected_present = None if expected is None else len(parts & expected)
            return
    count_present(state, rule, spec, paths_under(tx, table_id, prefix))


def adopt(rule: SetRule, version: int, spec: PartitionSpec, state: SetStateRow) -> None:
    """Judge the set by the rule of ``version`` from now on (its deadline follows)."""
    state.rule_version = version
    state.deadline_at = deadline_at(rule, spec, state.first_part_at)


def keep_counts(
    tx: Tx,
    table_id: int,
    rule: SetRule,
    version: int,
    spec: PartitionSpec,
    state: SetStateRow,
    *,
    created: bool,
    changes: Sequence[Change],
) -> None:
    """Bring the locked row's counts up to this transaction: its ``changes`` moved them;
    a row just created, counted under another rule version or never counted is counted
    afresh (one read of the set's partitions, this transaction's included). Exact under
    racing writers: each moves them under the row's lock, and a count reads only what
    committed before the lock was taken (or this transaction wrote)."""
    expected = expected_of(rule)
    stale = state.rule_version != version
    if stale:
        adopt(rule, version, spec, state)
    if created or stale or (expected is not None and state.expected_present is None):
        _count_afresh(tx, table_id, rule, spec, state, changes)
        return
    if not changes:
        return
    state.part_count += sum(delta for _, delta in changes)
    if expected is not None and state.expected_present is not None:
        state.expected_present += sum(delta for part, delta in changes if part in expected)


class Counting(NamedTuple):
    """What a rule's counting writes need, worked out once per rule object."""

    rule: SetRule
    expected: frozenset[str] | None
    """The parts the rule expects (:func:`expected_of`)."""
    total: int | None
    """The count that makes a set complete: its expected parts, else the minimum of
    partitions (None: not countable)."""
    countable: bool
    """Whether a set's verdict follows from its row's counts, moved by one counting
    ``UPDATE … RETURNING`` (not for a rule whose expected parts are another set's)."""
    untimed: bool
    """Whether a set of the rule has no time of its own (no deadline, no quiet period)."""


_COUNTINGS: dict[int, Counting] = {}
""":func:`counting_of` by the rule object's id (checked: the object itself is kept)."""


def counting_of(rule: SetRule) -> Counting:
    """What the counting writes of ``rule`` need (found again by the rule object, which
    the catalog hands out once per stored rule)."""
    found = _COUNTINGS.get(id(rule))
    if found is not None and found.rule is rule:
        return found
    expected = expected_of(rule)
    total = rule.min_partitions if expected is None else len(expected)
    untimed = rule.deadline is None and rule.deadline_after is None and not rule.quiet_seconds
    if len(_COUNTINGS) >= 256:
        _COUNTINGS.clear()
    found = _COUNTINGS[id(rule)] = Counting(rule, expected, total, total is not None, untimed)
    return found


def move_values(
    table_id: int, counting: Counting, version: int, set_spec: str, changes: Sequence[Change]
) -> dict[str, object]:
    """The parameters of the counting write of ``changes`` under the set ``set_spec``
    (canonical): ``b_table``, ``b_set``, ``b_version``, ``b_added``, ``b_total`` (what
    makes the set complete) and, for a rule that names its parts, ``b_expected``."""
    expected = counting.expected
    added = expected_added = 0
    for part, delta in changes:
        added += delta
        if expected is not None and part in expected:
            expected_added += delta
    values: dict[str, object] = {
        "b_table": table_id,
        "b_set": set_spec,
        "b_version": version,
        "b_added": added,
        "b_total": counting.total,
    }
    if expected is not None:
        values["b_expected"] = expected_added
    return values
