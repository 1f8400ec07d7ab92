"""On SQLite, the event id of the retained dones and of the outbox is the table's rowid.

``event_id BIGINT PRIMARY KEY`` is not an alias of SQLite's rowid (only the type name
``INTEGER`` makes one): each of the two tables kept its rowid tree and, beside it, a
unique index of the event ids (``sqlite_autoindex_*``), one more B-tree for every done
and every event written and for every row the sweep deletes. Here both tables are
rebuilt on SQLite with ``event_id INTEGER``: the column becomes the rowid, the index
goes, every other index, constraint and row is kept, and the planner's statistics
(``sqlite_stat1``, which dropping the old table drops). The ids are still the catalog's
(the event counter hands them out and every insert names its id), so nothing relies on
SQLite choosing a rowid; neither table had ``AUTOINCREMENT``. PostgreSQL is unchanged
(``BIGINT`` there is the right type and its primary key the only index of the ids).

A rebuild copies its table: on SQLite it takes about as long as writing the rows again
and holds the writers' lock meanwhile (docs/operations.md, "Upgrading"). Each table's
rebuild is logged (``hcat-notify -v db upgrade``) with its rows and seconds.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# Alembic loads this file under a generated module name: the logger is named for the
# package, so that the CLI's -v shows it with the catalog's other lines.
logger = logging.getLogger("hcat_notify.migrations")

_TABLES = ("hcat_mark_set_done", "hcat_outbox")


def _statistics(bind: sa.Connection, table: str) -> list[tuple[str, str | None, str]]:
    """The planner's statistics of ``table`` (``ANALYZE``'s, if it was ever run)."""
    if bind.execute(sa.text("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")).first():
        query = sa.text("SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl = :table")
        return [(row[0], row[1], row[2]) for row in bind.execute(query, {"table": table})]
    return []


def _restore_statistics(
    bind: sa.Connection, table: str, rows: int, kept: list[tuple[str, str | None, str]]
) -> None:
    """Put back what the rebuild dropped with the old table: the statistics of the
    table and of its indexes still there (the rows did not change), and after a
    downgrade those of the primary key's index again (unique: its rows, then 1)."""
    indexes = set(
        bind.execute(
            sa.text("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :table"),
            {"table": table},
        ).scalars()
    )
    restored = [(tbl, idx, stat) for tbl, idx, stat in kept if idx is None or idx in indexes]
    named = {idx for _, idx, _ in kept}
    if restored:
        restored += [
            (table, idx, f"{rows} 1")
            for idx in sorted(indexes - named)
            if idx.startswith("sqlite_autoindex_")
        ]
    for tbl, idx, stat in restored:
        bind.execute(
            sa.text("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (:tbl, :idx, :stat)"),
            {"tbl": tbl, "idx": idx, "stat": stat},
        )


def _rebuild(old: sa.types.TypeEngine[int], new: sa.types.TypeEngine[int]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    for table in _TABLES:
        kept = _statistics(bind, table)
        rows = bind.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
        logger.info("rebuilding %s (%d rows) with event_id %s", table, rows, new)
        started = time.monotonic()
        # recreate="always": the type alone would not make SQLite rebuild the table,
        # and only a new CREATE TABLE makes the column the rowid (or not)
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.alter_column(
                "event_id",
                existing_type=old,
                type_=new,
                existing_nullable=False,
                autoincrement=False,
            )
        _restore_statistics(bind, table, rows, kept)
        logger.info("rebuilt %s in %.1f s", table, time.monotonic() - started)


def upgrade() -> None:
    _rebuild(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    _rebuild(sa.Integer(), sa.BigInteger())
