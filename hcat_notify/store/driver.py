"""Statements run on the database driver's own cursor, for the hot writes where
SQLAlchemy's steps (cache key, parameters, result) cost more than the statement: built
as Core statements, compiled once per dialect, and sent together in one round trip
where the driver pipelines (psycopg: PostgreSQL's pipeline mode). Why, and what it
saves, is in docs/completeness.md ("What a write with a rule costs")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

__all__ = ["DriverSQL", "Statement", "compiled", "first_rows", "pipelines"]

Statement = tuple[str, Sequence[Any] | Mapping[str, Any]]
"""A statement as the driver takes it: its SQL and its parameters."""


@dataclass(frozen=True)
class DriverSQL:
    """A Core statement compiled for one driver: its SQL, and the order of its
    parameters (None: by name)."""

    sql: str
    order: tuple[str, ...] | None

    def bind(self, values: Mapping[str, Any]) -> Statement:
        """The statement with ``values`` (by parameter name) as the driver takes them."""
        return self.sql, values if self.order is None else tuple(values[n] for n in self.order)


_COMPILED: dict[tuple[Callable[..., ClauseElement], Any, str, str], DriverSQL] = {}


def compiled(dialect: Dialect, build: Callable[..., ClauseElement], *args: Any) -> DriverSQL:
    """``build(dialect name, *args)`` compiled for ``dialect``'s driver, once."""
    key = (build, args, dialect.name, dialect.paramstyle)
    found = _COMPILED.get(key)
    if found is None:
        statement = build(dialect.name, *args).compile(dialect=dialect)
        assert isinstance(statement, SQLCompiler)  # selects, inserts and updates
        order = tuple(statement.positiontup or ()) if statement.positional else None
        found = _COMPILED[key] = DriverSQL(statement.string, order)
    return found


_PREPARED: Mapping[str, Any] = {"prepare": True}
_AS_IS: Mapping[str, Any] = {}


@functools.cache
def _psycopg_pipelines() -> bool:
    from psycopg import Pipeline  # the driver of the postgres extra

    return Pipeline.is_supported()


def pipelines(connection: Connection) -> bool:
    """Whether the connection's driver sends statements together (psycopg 3 with a
    libpq that has pipeline mode)."""
    return connection.dialect.driver == "psycopg" and _psycopg_pipelines()


def first_rows(connection: Connection, statements: Sequence[Statement]) -> list[Any]:
    """Run ``statements`` in ``connection``'s transaction on its driver: in one round
    trip where it pipelines (:func:`pipelines`), else one after the other; the first row
    of each (None: no row). A driver error comes as SQLAlchemy's (``DBAPIError``), as
    from ``connection.execute``; nothing after a failed statement has run."""
    fairy = connection.connection
    cursors: list[Any] = []
    current: Statement | None = None
    # psycopg: prepared at once (these run on every write; by default it prepares a
    # statement at its sixth run, and never one whose results come in a pipeline)
    prepared = _PREPARED if connection.dialect.driver == "psycopg" else _AS_IS
    try:
        if len(statements) > 1 and pipelines(connection):
            driver = cast(Any, fairy.dbapi_connection)
            with driver.pipeline():  # sent at once; the results come when it ends
                for current in statements:
                    cursors.append(driver.cursor())
                    cursors[-1].execute(*current, **prepared)
            return [cursor.fetchone() for cursor in cursors]
        rows = []
        for current in statements:
            cursors.append(fairy.cursor())
            cursors[-1].execute(*current, **prepared)
            rows.append(cursors[-1].fetchone())
        return rows
    except connection.dialect.loaded_dbapi.Error as exc:
        sql, params = current if current is not None else (None, None)
        raise DBAPIError.instance(
            sql, params, exc, connection.dialect.loaded_dbapi.Error, dialect=connection.dialect
        ) from exc
    finally:
        for cursor in cursors:
            cursor.close()
