"""The records of completeness rules and sets, as the catalog hands them out
(docs/completeness.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from hcat_notify.model.completeness import SetRule, SetState
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec

__all__ = ["DuePass", "RuleRecord", "SetReport", "epoch_time"]


def epoch_time(seconds: float | None) -> datetime | None:
    """Seconds since the epoch (the database's clock) as an aware UTC datetime."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True)
class RuleRecord:
    """One version of a table's completeness rule."""

    table: TableName
    version: int
    rule: SetRule | None
    """None: the rule was removed at this version."""
    principal: str | None
    created_at: datetime


@dataclass(frozen=True)
class SetReport:
    """Where one set stands: what its rule expects, what is there, what is missing, its
    done or its deadline (``hcat-notify completeness``)."""

    table: TableName
    spec: PartitionSpec
    """The set (the rule's set keys), keys in the table's order."""
    rule: RuleRecord | None
    """The table's current rule (None: the table has none)."""
    state: SetState | None
    """None: no part of the set has arrived since the table has a rule."""
    generation: int
    """The set's current generation (1 until its content changes after a done)."""
    expected: int | None
    """Parts expected (None: the rule names none, e.g. no previous set yet)."""
    present: tuple[str, ...]
    """The set's partitions, full path forms, in path order."""
    missing: tuple[str, ...]
    """Expected partitions not there, full path forms (empty for ``min_partitions``)."""
    complete: bool
    done_generation: int | None = None
    """The generation of the set's last done (None: never done)."""
    done_reason: str | None = None
    done_at: datetime | None = None
    done_event_id: int | None = None
    deadline: datetime | None = None
    late_by: float | None = None
    """Seconds past the deadline while not done (None: not late)."""
    late_emitted: bool = False
    """Whether the deadline's verdict (SET_LATE, a partial done) was given."""
    first_part_at: datetime | None = None
    last_change_at: datetime | None = None
    quiet_until: datetime | None = None
    """Complete, waiting for its quiet period to end (then done)."""


@dataclass(frozen=True)
class DuePass:
    """What one timed pass over a member's buckets did."""

    evaluated: int
    """Sets looked at."""
    dones: tuple[int, ...]
    """Event ids of the MARK_SET_DONE messages written (quiet periods, partial dones)."""
    late: tuple[int, ...]
    """Event ids of the SET_LATE messages written."""
    lost: frozenset[int]
    """Buckets the member no longer owns at the epoch given: nothing written for them."""
    more: bool = False
    """More sets were due than the pass's limit: run it again at once."""
