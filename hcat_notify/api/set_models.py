"""The HTTP API's models of completeness rules and sets (docs/completeness.md):
``/v1/tables/{table}/expectation`` and ``/v1/tables/{table}/sets``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hcat_notify.model.completeness import OnDeadline, SetRule, SetState
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.records import as_datetime
from hcat_notify.store.set_records import RuleRecord, SetReport

__all__ = ["Rule", "RuleVersion", "SetDone", "SetList", "SetReportModel"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class Rule(BaseModel):
    """A completeness rule in its stored form (``SetRule.as_json``): the body of
    ``PUT /v1/tables/{table}/expectation``. Exactly one of ``parts``, ``likePrevious``
    and ``minPartitions`` says what a complete set is."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    set_keys: list[str] = Field(
        alias="set", description='The table\'s leading keys that make a set: ["datestamp"].'
    )
    parts: dict[str, str] = Field(
        default_factory=dict,
        description="The expected values of every key below the set: "
        '{"region": "us,eu,apac", "hour": "00..23"}.',
    )
    like_previous: bool = Field(
        default=False, description="Expect the partitions of the previous set."
    )
    min_partitions: int | None = Field(default=None, description="At least this many partitions.")
    quiet_seconds: int | None = Field(
        default=None, description="Done only after the set did not change for this long."
    )
    deadline: str | None = Field(
        default=None, description="KEY[+Nd] [HH:MM] (UTC) of a date key of the set."
    )
    deadline_after_seconds: int | None = Field(
        default=None, description="The deadline, in seconds after the set's first part."
    )
    on_deadline: Literal["late", "done", "nothing"] | None = Field(
        default=None, description="What an incomplete set gets at its deadline (default late)."
    )

    def stored(self) -> dict[str, Any]:
        """The rule's stored form, as :meth:`SetRule.from_json` reads it."""
        return self.model_dump(by_alias=True)

    @classmethod
    def of_rule(cls, rule: SetRule) -> Rule:
        return cls.model_validate(rule.as_json())

    def to_rule(self) -> SetRule:
        """The rule, as the server checked it (not checked again)."""
        return SetRule(
            set_keys=tuple(self.set_keys),
            parts=tuple(self.parts.items()),
            like_previous=self.like_previous,
            min_partitions=self.min_partitions,
            quiet_seconds=self.quiet_seconds,
            deadline=self.deadline,
            deadline_after=self.deadline_after_seconds,
            on_deadline=OnDeadline(self.on_deadline or OnDeadline.LATE.value),
        )


class RuleVersion(_Model):
    """One version of a table's completeness rule."""

    table: str
    version: int
    rule: Rule | None = Field(description="null: the rule was removed at this version.")
    principal: str | None
    created_at: datetime
    describe: str | None = Field(
        default=None, description="The rule as hcat-notify table expect arguments."
    )

    @classmethod
    def of_record(cls, record: RuleRecord) -> RuleVersion:
        return cls(
            table=str(record.table),
            version=record.version,
            rule=None if record.rule is None else Rule.of_rule(record.rule),
            principal=record.principal,
            created_at=record.created_at,
            describe=None if record.rule is None else record.rule.describe(),
        )

    def to_record(self) -> RuleRecord:
        return RuleRecord(
            table=TableName.parse(self.table),
            version=self.version,
            rule=None if self.rule is None else self.rule.to_rule(),
            principal=self.principal,
            created_at=as_datetime(self.created_at),
        )


class SetDone(_Model):
    """A set's last done."""

    generation: int
    reason: str | None
    at: datetime | None
    event_id: int | None


def _time(value: datetime | None) -> datetime | None:
    return None if value is None else as_datetime(value)


class SetReportModel(_Model):
    """Where one set stands (``hcat-notify completeness``)."""

    table: str
    set: str = Field(description="The set in path form, keys in the table's order.")
    set_spec: dict[str, str | None]
    rule: RuleVersion | None
    state: SetState | None = Field(description="null: no part of the set has arrived yet.")
    generation: int
    expected: int | None = Field(description="Parts expected (null: the rule names none).")
    present: list[str]
    missing: list[str]
    missing_count: int
    complete: bool
    done: SetDone | None = Field(description="The set's last done (null: never done).")
    deadline: datetime | None
    late_by_seconds: float | None = Field(description="Seconds past the deadline, not done.")
    late_emitted: bool
    first_part_at: datetime | None
    last_change_at: datetime | None
    quiet_until: datetime | None

    @classmethod
    def of_report(cls, report: SetReport) -> SetReportModel:
        done = None
        if report.done_generation is not None:
            done = SetDone(
                generation=report.done_generation,
                reason=report.done_reason,
                at=report.done_at,
                event_id=report.done_event_id,
            )
        return cls(
            table=str(report.table),
            set=report.spec.to_path(),
            set_spec=report.spec.as_dict(),
            rule=None if report.rule is None else RuleVersion.of_record(report.rule),
            state=report.state,
            generation=report.generation,
            expected=report.expected,
            present=list(report.present),
            missing=list(report.missing),
            missing_count=len(report.missing),
            complete=report.complete,
            done=done,
            deadline=report.deadline,
            late_by_seconds=report.late_by,
            late_emitted=report.late_emitted,
            first_part_at=report.first_part_at,
            last_change_at=report.last_change_at,
            quiet_until=report.quiet_until,
        )

    def to_report(self) -> SetReport:
        done = self.done
        return SetReport(
            table=TableName.parse(self.table),
            spec=PartitionSpec.from_mapping(self.set_spec),
            rule=None if self.rule is None else self.rule.to_record(),
            state=self.state,
            generation=self.generation,
            expected=self.expected,
            present=tuple(self.present),
            missing=tuple(self.missing),
            complete=self.complete,
            done_generation=None if done is None else done.generation,
            done_reason=None if done is None else done.reason,
            done_at=None if done is None else _time(done.at),
            done_event_id=None if done is None else done.event_id,
            deadline=_time(self.deadline),
            late_by=self.late_by_seconds,
            late_emitted=self.late_emitted,
            first_part_at=_time(self.first_part_at),
            last_change_at=_time(self.last_change_at),
            quiet_until=_time(self.quiet_until),
        )


class SetList(_Model):
    """Sets of a table, newest first."""

    sets: list[SetReportModel]
