"""Completeness rules: when a set of a table's partitions is complete
(docs/completeness.md).

A :class:`SetRule` names the table's leading keys that make a set (``datestamp``) and how
to tell the set is complete: the expected values of every key below the set
(``region=us,eu,apac hour=00..23``), the partitions of the previous set, or a minimum
count; optionally a quiet period and a deadline. Pure values: parsed from the command
line's strings, stored as JSON, checked against a table's keys.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from hcat_notify.errors import InvalidRuleError
from hcat_notify.model.rule_values import (
    as_date,
    expression_size,
    expression_values,
    parse_duration,
    parse_parts,
)
from hcat_notify.model.specs import PartitionSpec

__all__ = [
    "MAX_EXPECTED_PARTS",
    "DoneReason",
    "OnDeadline",
    "SetRule",
    "SetState",
    "deadline_at",
    "expected_parts",
    "parse_duration",
    "parse_parts",
    "parse_rule",
]

MAX_EXPECTED_PARTS = 100_000
"""The most parts a rule may expect per set."""

MAX_QUIET_SECONDS = 31 * 86400
MAX_DEADLINE_DAYS = 366

_RELATIVE_DEADLINE = re.compile(
    r"(?P<key>[a-z_][a-z0-9_]*)(?:\+(?P<days>\d{1,3})d)?(?:\s+(?P<hh>\d{2}):(?P<mm>\d{2}))?"
)


class OnDeadline(StrEnum):
    """What a set still incomplete at its deadline gets."""

    LATE = "late"  # a SET_LATE event (once), listing what is missing
    DONE = "done"  # a MARK_SET_DONE with reason ``partial``
    NOTHING = "nothing"  # nothing on the wire (``completeness`` still shows it late)


class DoneReason(StrEnum):
    """Why a MARK_SET_DONE was sent (``HCAT_DONE_REASON``)."""

    RULE = "rule"  # the set's rule was met (its first done)
    CHANGED = "changed"  # the set changed after its done and is complete again
    PARTIAL = "partial"  # the deadline passed with the set incomplete (``--on-deadline done``)
    WRITER = "writer"  # sent by hand (``send_mark_set_done``, ``--mark-set-done``)


class SetState(StrEnum):
    """Where a set stands (``set_states.state``)."""

    OPEN = "open"  # its current generation is not done
    DONE = "done"  # its current generation is done
    LATE = "late"  # not done, and its deadline passed
    REOPENED = "reopened"  # done once, then a drop left it incomplete


@dataclass(frozen=True)
class SetRule:
    """A table's completeness rule (one per table; versioned in the catalog).

    Exactly one of ``parts``, ``like_previous`` and ``min_partitions`` says what a
    complete set is. Build one with :func:`parse_rule` (which checks it against the
    table's keys) or :meth:`from_json`.
    """

    set_keys: tuple[str, ...]
    """The table's leading keys that make a set: ``("datestamp",)``."""
    parts: tuple[tuple[str, str], ...] = ()
    """Each key below the set with its expected values as given: ``("hour", "00..23")``."""
    like_previous: bool = False
    """Expect the partitions (below the set) of the previous set in path order."""
    min_partitions: int | None = None
    """Complete with at least this many partitions."""
    quiet_seconds: int | None = None
    """Done only after the set did not change for this long."""
    deadline: str | None = None
    """``KEY+Nd HH:MM``: a time relative to the set's date value (UTC)."""
    deadline_after: int | None = None
    """Seconds after the set's first part."""
    on_deadline: OnDeadline = OnDeadline.LATE

    def as_json(self) -> dict[str, Any]:
        """The stored form (``set_rules.rule``)."""
        return {
            "set": list(self.set_keys),
            "parts": dict(self.parts),
            "likePrevious": self.like_previous,
            "minPartitions": self.min_partitions,
            "quietSeconds": self.quiet_seconds,
            "deadline": self.deadline,
            "deadlineAfterSeconds": self.deadline_after,
            "onDeadline": self.on_deadline.value,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], partition_keys: Sequence[str]) -> SetRule:
        """A rule from its stored form, checked against the table's keys.

        Raises:
            InvalidRuleError: not a rule of that table.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("set"), list):
            raise InvalidRuleError("a stored rule must be an object with a 'set' list")
        return parse_rule(
            partition_keys,
            set_keys=data["set"],
            parts=dict(data.get("parts") or {}),
            like_previous=bool(data.get("likePrevious", False)),
            min_partitions=data.get("minPartitions"),
            quiet=data.get("quietSeconds"),
            deadline=data.get("deadline"),
            deadline_after=data.get("deadlineAfterSeconds"),
            on_deadline=data.get("onDeadline"),
        )

    def describe(self) -> str:
        """The rule as ``table expect`` arguments (``table show``)."""
        words = ["--set", ",".join(self.set_keys)]
        if self.parts:
            words += ["--parts", *(f"{key}={values}" for key, values in self.parts)]
        if self.like_previous:
            words.append("--like-previous")
        if self.min_partitions is not None:
            words += ["--min-partitions", str(self.min_partitions)]
        if self.quiet_seconds:
            words += ["--quiet", f"{self.quiet_seconds}s"]
        if self.deadline is not None:
            words += ["--deadline", repr(self.deadline)]
        if self.deadline_after is not None:
            words += ["--deadline-after", f"{self.deadline_after}s"]
        if self.deadline is not None or self.deadline_after is not None:
            words += ["--on-deadline", self.on_deadline.value]
        return " ".join(words)

    @property
    def part_keys(self) -> tuple[str, ...]:
        """The keys below the set, in the table's order (of ``parts``)."""
        return tuple(key for key, _ in self.parts)

    @property
    def expected_count(self) -> int | None:
        """How many parts a set is expected to have (None: the previous set decides)."""
        if self.parts:
            count = 1
            for key, expression in self.parts:
                count *= expression_size(key, expression)
            return count
        return self.min_partitions


def _check_set_keys(partition_keys: Sequence[str], set_keys: Sequence[str]) -> tuple[str, ...]:
    keys = tuple(partition_keys)
    given = tuple(str(key).strip() for key in set_keys)
    if not given:
        raise InvalidRuleError("a rule needs the keys of its sets (--set, e.g. --set datestamp)")
    for key in given:
        if key not in keys:
            raise InvalidRuleError(
                f"set key {key!r} is not a partition key of the table (keys: {', '.join(keys)})"
            )
    if given != keys[: len(given)]:
        raise InvalidRuleError(
            f"set keys {', '.join(given)} are not the table's leading keys "
            f"(a set is a prefix of {', '.join(keys)})"
        )
    if len(given) == len(keys):
        raise InvalidRuleError(
            "a set over every partition key is one partition; leave at least one key below it"
        )
    return given


def _check_parts(
    partition_keys: Sequence[str], set_keys: tuple[str, ...], parts: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    below = tuple(partition_keys)[len(set_keys) :]
    for key in parts:
        if key not in partition_keys:
            raise InvalidRuleError(
                f"expected parts name {key!r}, not a partition key of the table "
                f"(keys: {', '.join(partition_keys)})"
            )
        if key in set_keys:
            raise InvalidRuleError(f"expected parts name {key!r}, a key of the set itself")
    missing = [key for key in below if key not in parts]
    if missing:
        raise InvalidRuleError(
            f"expected parts must give every key below the set; {', '.join(missing)} missing"
        )
    ordered = tuple((key, str(parts[key]).strip()) for key in below)
    count = 1
    for key, expression in ordered:
        count *= expression_size(key, expression)
        if count > MAX_EXPECTED_PARTS:
            raise InvalidRuleError(
                f"the rule expects more than {MAX_EXPECTED_PARTS:,} parts per set; "
                "use --min-partitions for sets that large"
            )
    for key, expression in ordered:
        for value in expression_values(key, expression):
            PartitionSpec.from_mapping({key: value})  # a value a partition can have
    return ordered


def _bounded_duration(given: int | str, what: str, most_days: int) -> int:
    """Seconds of a duration of a rule (``--quiet``, ``--deadline-after``): 1 second to
    ``most_days`` days, so that ``0s`` is refused by each alike."""
    seconds = parse_duration(given, what=what)
    if not 1 <= seconds <= most_days * 86400:
        raise InvalidRuleError(
            f"{what} must be between 1 second and {most_days} days, not {given!r}"
        )
    return seconds


def _check_deadline(
    set_keys: tuple[str, ...],
    deadline: str | None,
    deadline_after: int | str | None,
    on_deadline: OnDeadline | str | None,
) -> tuple[str | None, int | None, OnDeadline]:
    if deadline is not None and deadline_after is not None:
        raise InvalidRuleError("give --deadline or --deadline-after, not both")
    relative = None
    if deadline is not None:
        text = " ".join(str(deadline).split())
        match = _RELATIVE_DEADLINE.fullmatch(text)
        if match is None:
            raise InvalidRuleError(
                f"deadline {deadline!r} is not KEY[+Nd] [HH:MM] (e.g. 'datestamp+1d 06:00')"
            )
        if match["key"] not in set_keys:
            raise InvalidRuleError(
                f"deadline {deadline!r} names {match['key']!r}, not a key of the set "
                f"({', '.join(set_keys)}): a deadline is KEY[+Nd] [HH:MM] (e.g. "
                f"'{set_keys[0]}+1d 06:00')"
            )
        if int(match["days"] or 0) > MAX_DEADLINE_DAYS:
            raise InvalidRuleError(f"deadline {deadline!r} is more than {MAX_DEADLINE_DAYS} days")
        if match["hh"] is not None and (int(match["hh"]) > 23 or int(match["mm"]) > 59):
            raise InvalidRuleError(f"deadline {deadline!r} has no such time of day")
        relative = text
    after = None
    if deadline_after is not None:
        after = _bounded_duration(deadline_after, "deadline-after", MAX_DEADLINE_DAYS)
    if on_deadline is None:
        return relative, after, OnDeadline.LATE
    try:
        verdict = OnDeadline(str(on_deadline))
    except ValueError:
        raise InvalidRuleError(
            f"on-deadline {on_deadline!r} is not one of late, done, nothing"
        ) from None
    if relative is None and after is None and verdict is not OnDeadline.LATE:
        raise InvalidRuleError("--on-deadline needs --deadline or --deadline-after")
    return relative, after, verdict


def parse_rule(
    partition_keys: Sequence[str],
    *,
    set_keys: Sequence[str] | str,
    parts: Mapping[str, str] | Sequence[str] | None = None,
    like_previous: bool = False,
    min_partitions: int | str | None = None,
    quiet: int | str | None = None,
    deadline: str | None = None,
    deadline_after: int | str | None = None,
    on_deadline: OnDeadline | str | None = None,
) -> SetRule:
    """A rule for a table with ``partition_keys``, from the command line's strings
    (``set_keys="datestamp"``, ``parts=["hour=00..23"]``, ``quiet="10m"``) or Python values.

    Raises:
        InvalidRuleError: the rule does not fit the table or is malformed (one line naming
            the problem).
    """
    keys = [key.strip() for key in set_keys.split(",")] if isinstance(set_keys, str) else set_keys
    checked_set = _check_set_keys(partition_keys, keys)
    given_parts = (
        dict(parts)
        if isinstance(parts, Mapping)
        else parse_parts(parts)
        if parts is not None
        else {}
    )
    ways = [bool(given_parts), bool(like_previous), min_partitions is not None]
    if sum(ways) != 1:
        raise InvalidRuleError(
            "a rule needs exactly one of --parts, --like-previous and --min-partitions"
            + (" (more than one given)" if sum(ways) > 1 else "")
        )
    checked_parts = _check_parts(partition_keys, checked_set, given_parts) if given_parts else ()
    minimum = None
    if min_partitions is not None:
        given = str(min_partitions).strip()
        if isinstance(min_partitions, bool) or not re.fullmatch(r"-?\d{1,9}", given):
            raise InvalidRuleError(f"min-partitions {min_partitions!r} is not a whole number")
        minimum = int(given)
        if not 1 <= minimum <= MAX_EXPECTED_PARTS:
            raise InvalidRuleError(
                f"min-partitions must be between 1 and {MAX_EXPECTED_PARTS:,}, not {minimum}"
            )
    quiet_seconds = None
    if quiet is not None:
        quiet_seconds = _bounded_duration(quiet, "quiet period", MAX_QUIET_SECONDS // 86400)
    relative, after, verdict = _check_deadline(checked_set, deadline, deadline_after, on_deadline)
    return SetRule(
        set_keys=checked_set,
        parts=checked_parts,
        like_previous=bool(like_previous),
        min_partitions=minimum,
        quiet_seconds=quiet_seconds,
        deadline=relative,
        deadline_after=after,
        on_deadline=verdict,
    )


@functools.lru_cache(maxsize=64)
def expected_parts(rule: SetRule) -> tuple[str, ...] | None:
    """The path forms of the parts a set of ``rule`` expects, below the set
    (``region=us/hour=00``), in order; None when the rule names none (``like_previous``,
    ``min_partitions``: the store decides)."""
    if not rule.parts:
        return None
    segments = [
        [PartitionSpec(((key, value),)).to_path() for value in expression_values(key, expression)]
        for key, expression in rule.parts
    ]
    return tuple("/".join(combination) for combination in itertools.product(*segments))


def deadline_at(
    rule: SetRule, set_spec: PartitionSpec, first_part_at: float | None
) -> float | None:
    """When a set of ``rule`` is due (seconds since the epoch, UTC), or None: no deadline,
    a set whose key value is not a date, or (``deadline_after``) no part yet."""
    if rule.deadline_after is not None:
        return None if first_part_at is None else first_part_at + rule.deadline_after
    if rule.deadline is None:
        return None
    match = _RELATIVE_DEADLINE.fullmatch(rule.deadline)
    if match is None:
        return None
    value = set_spec.as_dict().get(match["key"])
    day = as_date(value) if value is not None else None
    if day is None:
        return None
    moment = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
        days=int(match["days"] or 0),
        hours=int(match["hh"] or 0),
        minutes=int(match["mm"] or 0),
    )
    return moment.timestamp()
