"""Upgrading a SQLite catalog keeps the rows of the tables whose parents a migration
rebuilds. Alembic's batch mode rebuilds a SQLite table by copying it and dropping the
original; with foreign keys enforced, that drop deleted every child row through
``ON DELETE CASCADE`` (0005 rebuilds ``hcat_tables``: its partitions and retained dones
went; 0017 rebuilds ``hcat_webhooks``: its progress went)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import text

from hcat_notify.errors import StoreError
from hcat_notify.store.engine import current_revision, open_engine, upgrade
from hcat_notify.store.revision import SCHEMA_REVISION
from tests.revisions import catalog_at

_AT = "'2026-11-01 00:00:00'"
_TABLE = (
    "INSERT INTO hcat_tables (id, db_name, table_name, location, storage_format,"
    " partition_keys, table_type, properties, retention_seconds, created_at, updated_at,"
    f" version) VALUES (1, 'web', 'clicks', '/data/clicks', 'parquet', '[\"ds\"]',"
    f" 'MANAGED_TABLE', '{{}}', 604800, {_AT}, {_AT}, 1)"
)
_PARTITION = (
    "INSERT INTO hcat_partitions (id, table_id, partition_values, path_spec, location,"
    " job_id, file_count, total_bytes, archived, event_id, created_at, updated_at, version)"
    " VALUES (1, 1, '[\"2026-11-01\"]', 'ds=2026-11-01', '/data/clicks/ds=2026-11-01', NULL,"
    f" 1, 10, 0, 1, {_AT}, {_AT}, 1)"
)
_DONE = (
    "INSERT INTO hcat_mark_set_done (event_id, table_id, spec, spec_json, created_at,"
    f" expires_at) VALUES (2, 1, 'ds=2026-11-01', '{{\"ds\": \"2026-11-01\"}}', {_AT},"
    " '2026-12-01 00:00:00')"
)
_WEBHOOK = (
    "INSERT INTO hcat_webhooks (id, name, url, tables, format, state, secret, start_after,"
    " created_at, version) VALUES (1, 'hook', 'https://example.invalid/h', '[\"web.*\"]',"
    " 'hive', 'active', 'plain:whsec_AAAA', 0, 0, 1)"
)
_PROGRESS = (
    "INSERT INTO hcat_webhook_progress (webhook_id, topic, bucket, last_event_id, epoch,"
    " updated_at, attempts) VALUES (1, 'hcat.web.clicks', 1, 2, 1, 0, 0)"
)


def _counts(url: str, *tables: str) -> dict[str, int]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return {
                name: int(connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one())
                for name in tables
            }
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("revision", "statements", "children"),
    [
        pytest.param(
            "0004",
            (_TABLE, _PARTITION, _DONE),
            ("hcat_partitions", "hcat_mark_set_done"),
            id="0005-rebuilds-tables",
        ),
        pytest.param(
            "0016",
            (_WEBHOOK, _PROGRESS),
            ("hcat_webhook_progress",),
            id="0017-rebuilds-webhooks",
        ),
    ],
)
def test_an_upgrade_keeps_the_children_of_the_tables_it_rebuilds(
    tmp_path: Path, revision: str, statements: tuple[str, ...], children: tuple[str, ...]
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog_at(sqlite_url, revision, *statements)
    assert _counts(sqlite_url, *children) == dict.fromkeys(children, 1)
    engine = open_engine(sqlite_url)
    try:
        assert upgrade(engine) == (revision, SCHEMA_REVISION)
        with engine.connect() as connection:
            # The pool's connection that migrated enforces foreign keys again.
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    finally:
        engine.dispose()
    assert _counts(sqlite_url, *children) == dict.fromkeys(children, 1)


def test_an_upgrade_that_would_leave_a_row_without_its_parent_changes_nothing(
    tmp_path: Path,
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog_at(sqlite_url, "0016", _WEBHOOK, _PROGRESS)
    with closing(sqlite3.connect(tmp_path / "catalog.db")) as raw:  # enforcement off
        raw.execute("DELETE FROM hcat_webhooks")  # leaves its progress row an orphan
        raw.commit()
    engine = open_engine(sqlite_url)
    try:
        with pytest.raises(StoreError, match=r"hcat_webhook_progress row 1 names a missing"):
            upgrade(engine)
        assert current_revision(engine) == "0016"
    finally:
        engine.dispose()
