"""Figures over the sets of the tables with a completeness rule, for ``/metrics``:
sets late, parts missing from sets not done, and how long after their last change the
sets done now got their done (docs/completeness.md)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from hcat_notify.model.completeness import SetState
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.records import info_of
from hcat_notify.store.set_assess import assess
from hcat_notify.store.set_rules import current_rule
from hcat_notify.store.tx import Tx

__all__ = ["MAX_OPEN_SETS", "SetFigures", "set_figures"]

MAX_OPEN_SETS = 100
"""Sets not done per table whose missing parts are counted (the last changed first)."""


@dataclass(frozen=True)
class SetFigures:
    """Per table (with a rule): sets late and missing parts; the done latencies."""

    late: dict[str, int]
    """Table: its sets past their deadline with the deadline's verdict given, not done."""
    missing: dict[str, int]
    """Table: expected parts missing from its sets not done (at most
    :data:`MAX_OPEN_SETS` sets each, the last changed)."""
    done_latency: list[tuple[str, float]]
    """(reason, seconds from the set's last change to its done) of every set done now."""


def set_figures(tx: Tx) -> SetFigures:
    """The figures, read in ``tx``."""
    late: dict[str, int] = {}
    missing: dict[str, int] = {}
    rows = tx.session.scalars(select(TableRow).where(TableRow.rule_version.is_not(None))).all()
    for row in rows:
        found = current_rule(row)
        if found is None:
            continue
        rule = found[0]
        name = str(info_of(row).name)
        keys = info_of(row).partition_keys
        late[name] = tx.session.execute(
            select(func.count()).where(
                SetStateRow.table_id == row.id, SetStateRow.state == SetState.LATE.value
            )
        ).scalar_one()
        open_sets = tx.session.scalars(
            select(SetStateRow.set_spec)
            .where(SetStateRow.table_id == row.id, SetStateRow.state != SetState.DONE.value)
            .order_by(SetStateRow.last_change_at.desc())
            .limit(MAX_OPEN_SETS)
        ).all()
        count = 0
        for canonical in open_sets:
            spec = PartitionSpec.parse(canonical).for_table(keys, partial=True)
            assessment = assess(tx, row.id, rule, spec)
            if assessment.expected is not None:
                count += max(len(assessment.missing), assessment.expected - len(assessment.present))
        missing[name] = count
    latency: list[tuple[str, float]] = []
    done = tx.session.execute(
        select(SetStateRow.done_reason, SetStateRow.done_at, SetStateRow.last_change_at).where(
            SetStateRow.state == SetState.DONE.value
        )
    )
    for reason, done_at, changed_at in done:
        if done_at is not None and changed_at is not None:
            latency.append((reason or "", max(0.0, done_at - changed_at)))
    return SetFigures(late, missing, latency)
