"""Reading one table's row without SQLAlchemy, for commands that must start fast.

``hcat-notify topic`` and ``table show`` are called per task by shell schedulers; on a
SQLite catalog they read the row with the standard library's ``sqlite3`` and decode it
exactly as the store does (:func:`hcat_notify.store.records.table_info`). Anything else
(another backend, a catalog not at this version's schema revision) answers None and the
caller uses the :class:`~hcat_notify.store.Catalog`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hcat_notify.config import Settings
from hcat_notify.model.names import TableName
from hcat_notify.store.records import TABLE_COLUMNS, TableInfo, table_info
from hcat_notify.store.revision import SCHEMA_REVISION

__all__ = ["quick_table", "sqlite_file"]

_SQLITE_PREFIXES = ("sqlite:///", "sqlite+pysqlite:///")
_TABLE_QUERY = (
    f"SELECT {', '.join(TABLE_COLUMNS)} FROM hcat_tables WHERE db_name = ? AND table_name = ?"
)


def sqlite_file(url: str) -> Path | None:
    """The file of a plain ``sqlite:///path`` URL, or None for anything else."""
    for prefix in _SQLITE_PREFIXES:
        if url.startswith(prefix):
            rest = url[len(prefix) :]
            if not rest or "?" in rest or rest == ":memory:" or rest.startswith("file:"):
                return None
            return Path(rest).expanduser()
    return None


def quick_table(settings: Settings, table: TableName | str) -> TableInfo | None:
    """The table's record read through ``sqlite3``, or None when that does not apply.

    Raises:
        InvalidIdentifierError: ``table`` is not ``db.table``.

    A table that is not registered also answers None: the store says whether it was
    dropped (:class:`~hcat_notify.errors.TableDroppedError`) or never existed.
    """
    name = table if isinstance(table, TableName) else TableName.parse(table)
    path = sqlite_file(settings.database_url)
    if path is None or not path.is_file():
        return None
    try:
        connection = sqlite3.connect(path, timeout=30)
    except sqlite3.Error:
        return None
    try:
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA query_only = 1")
        version = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        if version is None or version[0] != SCHEMA_REVISION:
            return None
        row = connection.execute(_TABLE_QUERY, (name.db, name.table)).fetchone()
    except sqlite3.Error:
        return None  # damaged, locked, not ours: the store says what is wrong, in one line
    finally:
        connection.close()
    if row is None:
        return None
    return table_info(dict(zip(row.keys(), tuple(row), strict=True)))
