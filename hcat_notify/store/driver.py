"""Statements run on the database driver's own cursor, for the hot writes where
SQLAlchemy's steps (cache key, parameters, result) cost more than the statement: built
as Core statements, compiled once per dialect, and sent together in one round trip
where the driver pipelines (psycopg: PostgreSQL's pipeline mode). Why, and what it
saves, is in docs/completeness.md ("What a write with a rule costs")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

__all__ = ["DriverSQL", "Statement", "compiled", "first_rows", "pipelines", "row_count"]

Statement = tuple[str, Sequence[Any] | Mapping[str, Any]]
"""A statement as the driver takes it: its SQL and its parameters."""


@dataclass(frozen=True)
class DriverSQL:
    """A Core statement compiled for one driver: its SQL, the order of its parameters
    (None: by name) and the values written into the statement itself (``state='open'``)."""

    sql: str
    order: tuple[str, ...] | None
    fixed: Mapping[str, Any]
    _pick: Callable[[Mapping[str, Any]], Sequence[Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        order = self.order or ()
        if len(order) > 1:  # one C call for the lot
            pick: Callable[[Mapping[str, Any]], Sequence[Any]] = itemgetter(*order)
        else:
            pick = lambda values: tuple(values[n] for n in order)  # noqa: E731
        object.__setattr__(self, "_pick", pick)

    def bind(self, values: Mapping[str, Any]) -> Statement:
        """The statement with ``values`` (by parameter name) as the driver takes them."""
        if self.fixed:
            values = {**self.fixed, **values}
        return self.sql, values if self.order is None else self._pick(values)


_COMPILED: dict[tuple[Callable[..., ClauseElement], Any, str, str], DriverSQL] = {}


def compiled(dialect: Dialect, build: Callable[..., ClauseElement], *args: Any) -> DriverSQL:
    """``build(dialect name, *args)`` compiled for ``dialect``'s driver, once."""
    key = (build, args, dialect.name, dialect.paramstyle)
    found = _COMPILED.get(key)
    if found is None:
        statement = build(dialect.name, *args).compile(dialect=dialect)
        assert isinstance(statement, SQLCompiler)  # selects, inserts and updates
        order = tuple(statement.positiontup or ()) if statement.positional else None
        fixed = {name: bind.effective_value for name, bind in statement.binds.items()}
        fixed = {name: value for name, value in fixed.items() if not statement.binds[name].required}
        found = _COMPILED[key] = DriverSQL(statement.string, order, fixed)
    return found


_PREPARED: Mapping[str, Any] = {"prepare": True}
_AS_IS: Mapping[str, Any] = {}


@functools.cache
def _psycopg_pipelines() -> bool:
    from psycopg import Pipeline  # the driver of the postgres extra

    return Pipeline.is_supported()


def pipelines(dialect: Dialect) -> bool:
    """Whether the dialect's driver sends statements together (psycopg 3 with a libpq
    that has pipeline mode)."""
    return dialect.driver == "psycopg" and _psycopg_pipelines()


def first_rows(connection: Connection, statements: Sequence[Statement]) -> list[Any]:
    """Run ``statements`` in ``connection``'s transaction on its driver: in one round
    trip where it pipelines (:func:`pipelines`), else one after the other; the first row
    of each (None: no row). A driver error comes as SQLAlchemy's (``DBAPIError``), as
    from ``connection.execute``; nothing after a failed statement has run."""
    dialect = connection.dialect
    fairy = connection.connection
    current: Statement | None = None
    # psycopg: prepared at once (these run on every write; by default it prepares a
    # statement at its sixth run, and never one whose results come in a pipeline)
    prepared = _PREPARED if dialect.driver == "psycopg" else _AS_IS
    try:
        if len(statements) > 1 and pipelines(dialect):
            return _pipelined(cast(Any, fairy.dbapi_connection), statements, prepared)
        rows = []
        cursor = fairy.cursor()
        try:
            for current in statements:
                cursor.execute(*current, **prepared)
                rows.append(cursor.fetchone())
        finally:
            cursor.close()
        return rows
    except dialect.loaded_dbapi.Error as exc:
        raise _as_sqlalchemy(dialect, current, exc) from exc


def row_count(connection: Connection, statement: Statement) -> int:
    """Run ``statement`` (one that returns no rows) in ``connection``'s transaction on
    its driver; the rows it changed. Errors as from :func:`first_rows`."""
    dialect = connection.dialect
    prepared = _PREPARED if dialect.driver == "psycopg" else _AS_IS
    cursor = connection.connection.cursor()
    try:
        cursor.execute(*statement, **prepared)
        return int(cursor.rowcount)
    except dialect.loaded_dbapi.Error as exc:
        raise _as_sqlalchemy(dialect, statement, exc) from exc
    finally:
        cursor.close()


def _as_sqlalchemy(dialect: Dialect, statement: Statement | None, exc: Exception) -> StatementError:
    """A driver error of ``statement`` as SQLAlchemy raises it."""
    sql, params = statement if statement is not None else (None, None)
    return DBAPIError.instance(sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect)


def _pipelined(
    driver: Any, statements: Sequence[Statement], prepared: Mapping[str, Any]
) -> list[Any]:
    """psycopg: ``statements`` sent at once, their results read when the pipeline ends
    (one round trip); the first row of each."""
    cursors = [driver.cursor() for _ in statements]
    try:
        with driver.pipeline():
            for cursor, statement in zip(cursors, statements, strict=True):
                cursor.execute(*statement, **prepared)
        return [cursor.fetchone() for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()
