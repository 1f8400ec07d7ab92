"""``hcat-notify table expect`` (a table's completeness rule) and ``hcat-notify
completeness`` (where a set stands); docs/completeness.md."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EXIT_TIMEOUT,
    CliContext,
    emit,
    format_duration,
    handle_errors,
    output_option,
)
from hcat_notify.errors import InvalidRuleError

if TYPE_CHECKING:
    from hcat_notify.store.set_records import RuleRecord, SetReport

__all__ = ["EXIT_INCOMPLETE", "completeness", "expect", "report_dict", "rule_dict"]

EXIT_INCOMPLETE = EXIT_TIMEOUT
"""``completeness`` of a set that is neither complete nor done (1, as a wait that did
not see its done)."""
MAX_MISSING_LINES = 20


def rule_dict(record: RuleRecord | None) -> dict[str, Any] | None:
    """A rule version as ``-o json`` shows it (None: no rule)."""
    if record is None:
        return None
    rule = record.rule
    return {
        "version": record.version,
        "rule": None if rule is None else rule.as_json(),
        "describe": None if rule is None else rule.describe(),
        "principal": record.principal,
        "created_at": record.created_at,
    }


def _rule_text(record: RuleRecord | None) -> str:
    if record is None:
        return "none"
    if record.rule is None:
        return f"version {record.version}: removed"
    return f"version {record.version}: {record.rule.describe()}"


def _actor() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "unknown"


@click.command("expect")
@click.argument("name", metavar="DB.TABLE")
@click.argument("more_parts", nargs=-1, metavar="[KEY=VALUES]...")
@click.option(
    "--set", "set_keys", metavar="KEYS", help="The leading keys that make a set: datestamp."
)
@click.option(
    "--parts",
    "parts",
    multiple=True,
    metavar="KEY=VALUES",
    help="KEY=VALUES of each key below the set (values, 00..23 ranges, dates); the "
    "next arguments may give more: --parts region=us,eu hour=00..23.",
)
@click.option("--like-previous", is_flag=True, help="Expect the previous set's partitions.")
@click.option("--min-partitions", metavar="N", help="Or: at least N partitions.")
@click.option(
    "--quiet", metavar="DURATION", help="Done only after no change for this long (10m, 1h)."
)
@click.option("--deadline", help="'KEY[+Nd] [HH:MM]' (UTC), e.g. 'datestamp+1d 06:00'.")
@click.option(
    "--deadline-after", metavar="DURATION", help="Or: this long after the set's first part (4h)."
)
@click.option(
    "--on-deadline",
    metavar="late|done|nothing",
    help="late (SET_LATE, default), done (partial) or nothing.",
)
@click.option("--remove", is_flag=True, help="Remove the table's rule.")
@output_option
@click.pass_obj
@handle_errors
def expect(
    obj: CliContext,
    /,
    name: str,
    more_parts: tuple[str, ...],
    parts: tuple[str, ...],
    remove: bool,
    **options: Any,
) -> None:
    """Give a table a completeness rule: the catalog then writes each set's
    MARK_SET_DONE in the transaction that brings its last expected part (or --remove
    it). A bad rule is refused with one line; nothing is written.
    \f
    ``options``: the rule's other options, as :meth:`Catalog.expect` takes them."""
    if remove:
        if any(options.values()) or parts or more_parts:
            raise InvalidRuleError("--remove takes no other option")
        with obj.catalog() as catalog:
            version = catalog.sets.remove(name, principal=_actor())
        emit(
            obj,
            {"table": name, "version": version, "rule": None},
            lambda: f"rule of {name} removed (version {version})",
        )
        return
    if more_parts and not parts:
        raise InvalidRuleError(f"unexpected argument {more_parts[0]!r} (parts follow --parts)")
    if options["set_keys"] is None:
        raise InvalidRuleError("a rule needs the keys of its sets (--set, e.g. --set datestamp)")
    with obj.catalog() as catalog:
        catalog.expect(name, parts=[*parts, *more_parts] or None, principal=_actor(), **options)
        record = catalog.sets.rule(name)
    data = {"table": name, **(rule_dict(record) or {})}
    emit(obj, data, lambda: f"rule of {name} is {_rule_text(record)}")


def report_dict(report: SetReport) -> dict[str, Any]:
    """A set's report as ``-o json`` shows it (the API's ``sets`` in snake case)."""
    done = None
    if report.done_generation is not None:
        done = {
            "generation": report.done_generation,
            "reason": report.done_reason,
            "at": report.done_at,
            "event_id": report.done_event_id,
        }
    return {
        "table": str(report.table),
        "set": report.spec.to_path(),
        "set_spec": report.spec.as_dict(),
        "rule": rule_dict(report.rule),
        "state": None if report.state is None else report.state.value,
        "generation": report.generation,
        "expected": report.expected,
        "present_count": len(report.present),
        "present": list(report.present),
        "missing_count": len(report.missing),
        "missing": list(report.missing),
        "complete": report.complete,
        "done": done,
        "deadline": report.deadline,
        "late_by_seconds": report.late_by,
        "late_emitted": report.late_emitted,
        "first_part_at": report.first_part_at,
        "last_change_at": report.last_change_at,
        "quiet_until": report.quiet_until,
    }


def _when(value: Any) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _report_text(report: SetReport) -> str:
    state = "no part yet" if report.state is None else report.state.value
    expected = "unknown" if report.expected is None else str(report.expected)
    rows = [
        ("set", f"{report.table} {report.spec.to_path()}"),
        ("rule", _rule_text(report.rule)),
        ("state", f"{state}, generation {report.generation}"),
        ("expected", expected),
        ("present", str(len(report.present))),
        ("missing", str(len(report.missing))),
    ]
    if report.done_generation is not None:
        rows.append(
            (
                "done",
                f"generation {report.done_generation}, {report.done_reason or '-'}, "
                f"{_when(report.done_at)} (event {report.done_event_id})",
            )
        )
    else:
        rows.append(("done", "not yet"))
    if report.deadline is not None:
        late = (
            f", late by {format_duration(timedelta(seconds=round(report.late_by)))}"
            if report.late_by is not None
            else ""
        )
        rows.append(("deadline", f"{_when(report.deadline)}{late}"))
    if report.quiet_until is not None:
        rows.append(("quiet until", _when(report.quiet_until)))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    lines += [f"  missing {path}" for path in report.missing[:MAX_MISSING_LINES]]
    if len(report.missing) > MAX_MISSING_LINES:
        lines.append(f"  ... and {len(report.missing) - MAX_MISSING_LINES} more")
    return "\n".join(lines)


@click.command()
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, required=True, metavar="K=V...")
@output_option
@click.pass_obj
@handle_errors
def completeness(obj: CliContext, name: str, spec: tuple[str, ...]) -> None:
    """Where a set stands under its table's rule: the rule, expected / present /
    missing parts, the done (generation, reason, time) or the deadline and how late it
    is. Exit 0 when the set is complete or done, 1 when not, 2 on bad input. With
    HCAT_NOTIFY_API_URL set, the catalog is read through the HTTP API."""
    import contextlib

    from hcat_notify.consumer import open_reader, sets_of
    from hcat_notify.model.specs import PartitionSpec

    wanted = PartitionSpec.from_args(spec)
    with contextlib.closing(open_reader(obj.settings)) as reader:  # the API if named
        sets = sets_of(reader)
        assert sets is not None  # the catalog and the API client have one
        report = sets.state(name, wanted)
    emit(obj, report_dict(report), lambda: _report_text(report))
    done = report.done_generation is not None and report.done_generation == report.generation
    if not (report.complete or done):
        sys.exit(EXIT_INCOMPLETE)
