"""The statements on a set's row that every write to a table with a rule makes, built
once per dialect (docs/completeness.md, "What a write with a rule costs"): the
counting ``UPDATE … RETURNING`` (run on the driver's cursor), the row's lookup, its
creation and the count of a set's partitions."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    Dialect,
    Insert,
    Select,
    Table,
    Update,
    bindparam,
    case,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from hcat_notify.model.completeness import SetState
from hcat_notify.store.driver import Statement, compiled
from hcat_notify.store.models import PartitionRow, SetStateRow
from hcat_notify.store.tx import clock_sql

__all__ = [
    "Moved",
    "count_under",
    "create_statement",
    "insert_state",
    "mark_statement",
    "move_statement",
    "moved",
    "short_statement",
    "state_query",
    "under_params",
]

_STATES = cast(Table, SetStateRow.__table__)


class Moved(NamedTuple):
    """A set's row as the counting ``UPDATE … RETURNING`` left it (a tuple: made on
    every write to a table with a rule)."""

    state: str
    late_emitted: bool
    done_at: float | None
    deadline_at: float | None
    last_change_at: float | None
    due_at: float | None
    part_count: int
    expected_present: int | None
    generation: int


_MOVED = Moved._fields


def _moving(dialect: str, parts: bool) -> tuple[dict[str, Any], list[Any]]:
    """The counting write's new values and conditions (a current row: counted under
    the rule's version, not done)."""
    table = _STATES
    values = {
        "part_count": table.c.part_count + bindparam("b_added"),
        "last_change_at": clock_sql(dialect),
    }
    where = [
        table.c.table_id == bindparam("b_table"),
        table.c.set_spec == bindparam("b_set"),
        table.c.rule_version == bindparam("b_version"),
        table.c.state != literal_column(f"'{SetState.DONE.value}'"),
    ]
    if parts:
        values["expected_present"] = table.c.expected_present + bindparam("b_expected")
        where.append(table.c.expected_present.is_not(None))
    return values, where


@functools.cache
def _move_statement(dialect: str, parts: bool) -> Update:
    """The counting write of a settled set whose row is current (counted under the
    rule's version, not done): one statement, which also takes the row's lock."""
    values, where = _moving(dialect, parts)
    return update(_STATES).where(*where).values(values).returning(*(_STATES.c[n] for n in _MOVED))


@functools.cache
def _short_statement(dialect: str, parts: bool) -> Update:
    """The counting write of changes that leave a current set incomplete with nothing
    due: the move's, only where the row has neither a due time nor a deadline and its
    count after the changes stays below ``b_total`` (the expected parts with ``parts``,
    else the minimum of partitions); without ``RETURNING``, which SQLite pays for by
    materialising the row (the statement's cost three times over)."""
    values, where = _moving(dialect, parts)
    table = _STATES
    if parts:
        counted = table.c.expected_present + bindparam("b_expected")
    else:
        counted = table.c.part_count + bindparam("b_added")
    where += [
        table.c.due_at.is_(None),
        table.c.deadline_at.is_(None),
        counted < bindparam("b_total"),
    ]
    return update(table).where(*where).values(values)


@functools.cache
def _create_statement(dialect: str, parts: bool) -> Insert:
    """A new set's row, counted in the same statement, unless there is one: open,
    generation 1, its first part now (the database's clock), no deadline; its
    ``part_count`` the partitions under it (``b_table`` and :func:`under_params`'s);
    with ``parts``, ``expected_present`` is ``b_expected`` when the set holds exactly
    ``b_added`` partitions (all this write's: the expected ones among them are known),
    else NULL (counted afresh)."""
    table = _STATES
    present = count_under(dialect).scalar_subquery()
    now = clock_sql(dialect)
    values: dict[str, Any] = {
        "table_id": bindparam("b_table"),
        "set_spec": bindparam("b_set"),
        "bucket": bindparam("b_bucket"),
        "generation": 1,
        "state": SetState.OPEN.value,
        "rule_version": bindparam("b_version"),
        "first_part_at": now,
        "last_change_at": now,
        "late_emitted": False,
        "part_count": present,
    }
    if parts:
        values["expected_present"] = case(
            (present == bindparam("b_added"), bindparam("b_expected")), else_=null()
        )
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        insert(table)
        .values(values)
        .on_conflict_do_nothing(index_elements=["table_id", "set_spec"])
        .returning(*(table.c[n] for n in _MOVED))
    )


def create_statement(dialect: Dialect, parts: bool, values: Mapping[str, object]) -> Statement:
    """The creation of a new set's row with its counts (:func:`_create_statement`), as
    ``dialect``'s driver takes it: ``b_table``, ``b_set``, ``b_bucket``, ``b_version``,
    :func:`under_params`' and, with ``parts``, ``b_added`` and ``b_expected``. Its row
    (:func:`moved`) is None when the set had one already."""
    return compiled(dialect, _create_statement, parts).bind(values)


def move_statement(dialect: Dialect, parts: bool, values: Mapping[str, object]) -> Statement:
    """The counting write as ``dialect``'s driver takes it (``values``: ``b_table``,
    ``b_set``, ``b_version``, ``b_added`` and, with ``parts``, ``b_expected``), for
    :func:`~hcat_notify.store.driver.first_rows`: run on the driver's cursor, since
    SQLAlchemy's steps (cache key, parameters, result) cost more than the statement."""
    return compiled(dialect, _move_statement, parts).bind(values)


def short_statement(dialect: Dialect, parts: bool, values: Mapping[str, object]) -> Statement:
    """The counting write of changes that leave the set incomplete with nothing due
    (:func:`_short_statement`; ``values``: :func:`move_statement`'s and ``b_total``), for
    :func:`~hcat_notify.store.driver.row_count`: 0 when the set's row is not current,
    is due, has a deadline or would be complete (then :func:`move_statement`)."""
    return compiled(dialect, _short_statement, parts).bind(values)


@functools.cache
def _mark_statement(dialect: str, done: bool) -> Update:
    """A judged set's row (``b_table``, ``b_set``) marked: ``done`` (at ``b_done_at``,
    for ``b_reason``, as event ``b_event``; nothing due), else its due time (``b_due``)."""
    del dialect  # one form
    table = _STATES
    values: dict[str, Any]
    if done:
        values = {
            "state": SetState.DONE.value,
            "done_at": bindparam("b_done_at", type_=table.c.done_at.type),
            "done_reason": bindparam("b_reason", type_=table.c.done_reason.type),
            "done_event_id": bindparam("b_event", type_=table.c.done_event_id.type),
            "due_at": null(),
        }
    else:
        values = {"due_at": bindparam("b_due", type_=table.c.due_at.type)}
    where = (table.c.table_id == bindparam("b_table"), table.c.set_spec == bindparam("b_set"))
    return update(table).where(*where).values(values)


def mark_statement(dialect: Dialect, done: bool, values: Mapping[str, object]) -> Statement:
    """A judged set's row marked done or given its due time (:func:`_mark_statement`),
    for :func:`~hcat_notify.store.driver.row_count` (the row is locked by then)."""
    return compiled(dialect, _mark_statement, done).bind(values)


def moved(found: Sequence[Any] | None) -> Moved | None:
    """The counting write's row (its first row), or None (no current row: none, done,
    or counted under another version)."""
    return None if found is None else Moved._make(found)


@functools.cache
def state_query(dialect: str) -> Select[SetStateRow]:
    """A set's row (``b_table``, ``b_set``), loaded afresh, locked on PostgreSQL."""
    query = (
        select(SetStateRow)
        .where(
            SetStateRow.table_id == bindparam("b_table"),
            SetStateRow.set_spec == bindparam("b_set"),
        )
        .execution_options(populate_existing=True)
    )
    return query.with_for_update() if dialect == "postgresql" else query


@functools.cache
def insert_state(dialect: str) -> Insert:
    """A new set's row, unless there is one (the columns are its parameters)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    columns = (
        "table_id",
        "set_spec",
        "bucket",
        "generation",
        "state",
        "rule_version",
        "first_part_at",
        "last_change_at",
        "late_emitted",
        "deadline_at",
        "part_count",
    )
    return (
        insert(_STATES)
        .values({name: bindparam(name) for name in columns})
        .on_conflict_do_nothing(index_elements=["table_id", "set_spec"])
    )


@functools.cache
def count_under(dialect: str) -> Select[int]:
    """How many partitions of a table (``b_table``) are under a set: on SQLite, whose
    text compares bytewise (BINARY), the paths under "k=v/" are exactly those in
    ["k=v/", "k=v0") (``b_low``, ``b_high``; its LIKE ignores case and uses no index);
    elsewhere ``LIKE`` (``b_like``, escaped with ``/``)."""
    path = PartitionRow.path_spec
    where: list[Any] = [PartitionRow.table_id == bindparam("b_table")]
    if dialect == "sqlite":
        where += [path >= bindparam("b_low"), path < bindparam("b_high")]
    else:
        where.append(path.like(bindparam("b_like"), escape="/"))
    return select(func.count()).select_from(PartitionRow).where(*where)


def under_params(dialect: str, table_id: int, prefix: str) -> dict[str, object]:
    """The parameters of :func:`count_under` for the set whose path is ``prefix``
    (``k=v/``)."""
    if dialect == "sqlite":
        return {"b_table": table_id, "b_low": prefix, "b_high": prefix[:-1] + "0"}
    escaped = prefix.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return {"b_table": table_id, "b_like": escaped + "%"}
