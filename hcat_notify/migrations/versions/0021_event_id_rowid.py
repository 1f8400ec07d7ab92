"""On SQLite, the event id of the retained dones and of the outbox is the table's rowid.

``event_id BIGINT PRIMARY KEY`` is not an alias of SQLite's rowid (only the type name
``INTEGER`` makes one): each of the two tables kept its rowid tree and, beside it, a
unique index of the event ids (``sqlite_autoindex_*``), one more B-tree for every done
and every event written and for every row the sweep deletes. Here both tables are
rebuilt on SQLite with ``event_id INTEGER``: the column becomes the rowid, the index
goes, every other index, constraint and row is kept. The ids are still the catalog's
(the event counter hands them out and every insert names its id), so nothing relies on
SQLite choosing a rowid; neither table had ``AUTOINCREMENT``. PostgreSQL is unchanged
(``BIGINT`` there is the right type and its primary key the only index of the ids).

A rebuild copies its table: on SQLite it takes about as long as writing the rows again
and holds the writers' lock meanwhile (docs/operations.md, "Upgrading"). Each table's
rebuild is logged (``hcat-notify -v db upgrade``) with its rows and seconds.

Revision ID: 0021
Revises: 0018
Create Date: 2026-11-28
"""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0018"
branch_labels = None
depends_on = None

# Alembic loads this file under a generated module name: the logger is named for the
# package, so that the CLI's -v shows it with the catalog's other lines.
logger = logging.getLogger("hcat_notify.migrations")

_TABLES = ("hcat_mark_set_done", "hcat_outbox")


def _rebuild(old: sa.types.TypeEngine[int], new: sa.types.TypeEngine[int]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    for table in _TABLES:
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
        logger.info("rebuilt %s in %.1f s", table, time.monotonic() - started)


def upgrade() -> None:
    _rebuild(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    _rebuild(sa.Integer(), sa.BigInteger())
