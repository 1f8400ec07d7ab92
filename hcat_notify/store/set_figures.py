"""Figures over the sets of the tables with a completeness rule, for ``/metrics``:
sets late, parts missing from sets not done, and how long after their last change the
sets done now got their done (docs/completeness.md).

What a scrape reads grows with the tables that have a rule, their sets not done and the
sets done in the last day (partial indexes hold those), never with the years of sets
done: parts missing come from the counts each write keeps on the set's row, and the done
latencies are summed by the database, one row per reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import case, func, select

from hcat_notify.model.completeness import SetRule, SetState
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.records import info_of
from hcat_notify.store.set_assess import assess
from hcat_notify.store.set_rules import current_rule
from hcat_notify.store.tx import Tx

__all__ = ["DONE_WINDOW", "MAX_OPEN_SETS", "LatencyCounts", "SetFigures", "set_figures"]

MAX_OPEN_SETS = 100
"""Sets not done per table whose missing parts are counted (the last changed first)."""

DONE_WINDOW = 24 * 3600.0
"""Seconds back (database clock) whose dones the latency figures cover."""


@dataclass(frozen=True)
class LatencyCounts:
    """The done latencies of one reason, as a histogram: how many at or under each
    bound (the bounds asked for, in their order), how many in all, their sum."""

    at_most: tuple[int, ...]
    count: int
    total: float


@dataclass(frozen=True)
class SetFigures:
    """Per table (with a rule): sets late and missing parts; the done latencies."""

    late: dict[str, int]
    """Table: its sets past their deadline with the deadline's verdict given, not done."""
    missing: dict[str, int]
    """Table: expected parts missing from its sets not done (at most
    :data:`MAX_OPEN_SETS` sets each, the last changed)."""
    done_latency: dict[str, LatencyCounts]
    """Reason: seconds from the set's last change to its done, of the sets done now
    whose done came in the last :data:`DONE_WINDOW` seconds."""


def _missing(
    tx: Tx, table_id: int, rule: SetRule, version: int, keys: Sequence[str], open_set: SetStateRow
) -> int:
    """Parts missing from one set not done: from its row's counts when they are of the
    rule in force, else (a rule naming another set's parts, counts not kept yet) read."""
    if open_set.rule_version == version:
        if rule.parts and open_set.expected_present is not None:
            return max(0, (rule.expected_count or 0) - open_set.expected_present)
        if not rule.parts and rule.min_partitions is not None:
            return max(0, rule.min_partitions - open_set.part_count)
    spec = PartitionSpec.parse(open_set.set_spec).for_table(keys, partial=True)
    found = assess(tx, table_id, rule, spec)
    if found.expected is None:
        return 0
    return max(len(found.missing), found.expected - len(found.present))


def _latencies(tx: Tx, bounds: Sequence[float]) -> dict[str, LatencyCounts]:
    # SQLite's two-argument max() is PostgreSQL's greatest()
    larger = func.max if tx.dialect == "sqlite" else func.greatest
    seconds = larger(0.0, SetStateRow.done_at - SetStateRow.last_change_at)
    columns = [func.count(case((seconds <= bound, 1))) for bound in bounds]
    rows = tx.session.execute(
        select(SetStateRow.done_reason, func.count(), func.sum(seconds), *columns)
        .where(
            SetStateRow.state == SetState.DONE.value,
            SetStateRow.done_at >= tx.clock() - DONE_WINDOW,
            SetStateRow.last_change_at.is_not(None),
        )
        .group_by(SetStateRow.done_reason)
    )
    return {
        reason or "": LatencyCounts(tuple(int(n) for n in at_most), int(count), float(total or 0))
        for reason, count, total, *at_most in rows
    }


def set_figures(tx: Tx, latency_bounds: Sequence[float] = ()) -> SetFigures:
    """The figures, read in ``tx``; the done latencies counted at ``latency_bounds``."""
    late: dict[str, int] = {}
    missing: dict[str, int] = {}
    rules = tx.session.scalars(select(TableRow).where(TableRow.rule_version.is_not(None))).all()
    by_id = {row.id: row for row in rules}
    open_sets: dict[int, list[SetStateRow]] = {}
    # the sets not done, through the partial index that holds only them
    for open_set in tx.session.scalars(
        select(SetStateRow)
        .where(SetStateRow.state != SetState.DONE.value)
        .order_by(SetStateRow.table_id, SetStateRow.last_change_at.desc())
    ):
        open_sets.setdefault(open_set.table_id, []).append(open_set)
    for table_id, row in by_id.items():
        found = current_rule(row)
        if found is None:
            continue
        rule, version = found
        info = info_of(row)
        name = str(info.name)
        sets = open_sets.get(table_id, [])
        late[name] = sum(1 for s in sets if s.state == SetState.LATE.value)
        missing[name] = sum(
            _missing(tx, table_id, rule, version, info.partition_keys, s)
            for s in sets[:MAX_OPEN_SETS]
        )
    return SetFigures(late, missing, _latencies(tx, latency_bounds))
