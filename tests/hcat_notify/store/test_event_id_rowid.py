"""On SQLite an event id that is its table's primary key is the table's rowid (migration
0021): no second B-tree of the ids to keep on every done and event written and on every
row the sweep deletes. The migration rebuilds the two tables keeping every row, index
and constraint, and its downgrade restores the old shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, create_engine, inspect, text

from hcat_notify.store import Catalog
from hcat_notify.store.engine import alembic_config, open_engine
from tests.revisions import catalog_at

pytestmark = pytest.mark.integration

REBUILT = ("hcat_mark_set_done", "hcat_outbox")
AFTER = "0021"


def _before(revision: str) -> str:
    """The revision ``revision`` follows (the lead may chain it after another)."""
    from importlib import resources

    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(resources.files("hcat_notify").joinpath("migrations")))
    down = script.get_revision(revision).down_revision
    assert isinstance(down, str)
    return down


BEFORE = _before(AFTER)


def _pk_indexes(connection: Connection, table: str) -> list[str]:
    """The indexes SQLite keeps for ``table``'s primary key (none when it is the rowid)."""
    return [
        row[1]
        for row in connection.exec_driver_sql(f"PRAGMA index_list({table})")
        if row[3] == "pk"
    ]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_every_integer_primary_key_is_the_rowid_on_sqlite(catalog: Catalog) -> None:
    catalog.create_table("web.clicks", location="/data/web/clicks", partition_keys=["ds"])
    done = catalog.mark_set_done("web.clicks", {"ds": "20260101"})
    engine = create_engine(catalog.settings.database_url)
    try:
        with engine.connect() as connection:
            checked = []
            for table in inspect(connection).get_table_names():
                columns = list(connection.exec_driver_sql(f"PRAGMA table_info({table})"))
                keys = [column for column in columns if column[5] > 0]
                if len(keys) != 1 or "INT" not in keys[0][2].upper():
                    continue  # a text or composite key: no rowid alias possible
                assert (table, keys[0][2]) == (table, "INTEGER")
                assert _pk_indexes(connection, table) == []
                checked.append(table)
            assert set(REBUILT) <= set(checked)
            for table in REBUILT:
                rowid = connection.exec_driver_sql(
                    f"SELECT rowid FROM {table} WHERE event_id = ?", (done,)
                ).scalar_one()
                assert rowid == done
    finally:
        engine.dispose()


_ROWS = (
    "INSERT INTO hcat_tables (id, db_name, table_name, location, storage_format,"
    " partition_keys, table_type, properties, retention_seconds, topic, created_at,"
    " updated_at, version) VALUES (7, 'web', 'clicks', '/c', 'parquet', '[\"ds\"]',"
    " 'MANAGED_TABLE', '{}', 60, 'hcat.web.clicks', '2026-01-01 00:00:00',"
    " '2026-01-01 00:00:00', 1)",
    "INSERT INTO hcat_mark_set_done (event_id, table_id, spec, spec_json, created_at,"
    " expires_at, generation, reason) VALUES"
    " (5, 7, 'ds=1', '{\"ds\": \"1\"}', '2026-01-01 00:00:00', '2026-01-02 00:00:00', 1,"
    " 'writer'),"
    " (9000000000, 7, 'ds=2', '{\"ds\": \"2\"}', '2026-01-01 00:00:00',"
    " '2099-01-01 00:00:00', 2, NULL)",
    "INSERT INTO hcat_outbox (event_id, topic, bucket, event_type, table_name, headers,"
    " body, created_at, attempts, last_error, parked_at, dropped_at) VALUES"
    " (5, 'hcat.web.clicks', 3, 'MARK_SET_DONE', 'web.clicks', '{}', '{}',"
    " '2026-01-01 00:00:00', 0, NULL, NULL, NULL),"
    " (6, 'hcat.web.clicks', 3, 'ADD_PARTITION', 'web.clicks', '{}', '{}',"
    " '2026-01-01 00:00:00', 4, 'refused', '2026-01-01 00:01:00', NULL),"
    " (9000000000, 'hcat.web.clicks', 3, 'MARK_SET_DONE', 'web.clicks', '{}', '{}',"
    " '2026-01-01 00:00:00', 1, 'refused', NULL, NULL)",
)


def _shape(connection: Connection) -> dict[str, Any]:
    """The two tables' rows, columns, keys and indexes, as the database reports them."""
    schema = inspect(connection)
    shape: dict[str, Any] = {}
    for table in REBUILT:
        shape[table] = {
            "rows": [tuple(row) for row in connection.execute(text(f"SELECT * FROM {table}"))],
            "columns": [
                (column["name"], str(column["type"]), column["nullable"], column["default"])
                for column in schema.get_columns(table)
            ],
            "pk": schema.get_pk_constraint(table),
            "fks": schema.get_foreign_keys(table),
            "indexes": sorted(
                (
                    index["name"],
                    index["column_names"],
                    index["unique"],
                    {key: str(value) for key, value in index["dialect_options"].items()},
                )
                for index in schema.get_indexes(table)
            ),
        }
    return shape


def _shape_of(url: str) -> dict[str, Any]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return _shape(connection)
    finally:
        engine.dispose()


def _migrate(url: str, revision: str, *, down: bool = False) -> dict[str, Any]:
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            move = command.downgrade if down else command.upgrade
            move(alembic_config(connection, None), revision)
    finally:
        engine.dispose()
    return _shape_of(url)


def _sqlite_state(path: Path) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """The two tables' CREATE statements (and autoindexes) and planner statistics."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            return {
                name: [
                    (row[0], row[1], row[2])
                    for row in connection.exec_driver_sql(query + " ORDER BY 1, 2", REBUILT)
                ]
                for name, query in (
                    (
                        "master",
                        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN (?, ?)",
                    ),
                    ("stat1", "SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl IN (?, ?)"),
                )
            }
    finally:
        engine.dispose()


def test_the_migration_keeps_every_row_and_index_and_its_downgrade_the_old_shape(
    empty_db_url: str, tmp_path: Path
) -> None:
    sqlite = empty_db_url.startswith("sqlite")
    # on SQLite with the planner's statistics, which the rebuild must not lose
    catalog_at(empty_db_url, BEFORE, *_ROWS, *(["ANALYZE"] if sqlite else []))
    old = _shape_of(empty_db_url)
    path = tmp_path / "catalog.db"
    old_state = _sqlite_state(path) if sqlite else {}
    assert [len(old[table]["rows"]) for table in REBUILT] == [2, 3]

    # rows, columns, keys, foreign keys, indexes (partial ones too): all as they were but
    # the ids' type on SQLite
    expected = old
    if sqlite:
        expected = {
            table: {
                **shape,
                "columns": [
                    (name, "INTEGER" if name == "event_id" else kind, *rest)
                    for name, kind, *rest in shape["columns"]
                ],
            }
            for table, shape in old.items()
        }
        assert expected != old
    assert _migrate(empty_db_url, AFTER) == expected
    if sqlite:
        engine = create_engine(f"sqlite:///{path}")
        try:
            with engine.connect() as connection:
                for table in REBUILT:
                    assert _pk_indexes(connection, table) == []
                    pairs = connection.exec_driver_sql(f"SELECT rowid, event_id FROM {table}")
                    assert all(rowid == event_id for rowid, event_id in pairs)
                assert connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
                assert list(connection.exec_driver_sql("PRAGMA foreign_key_check")) == []
        finally:
            engine.dispose()
        statistics = _sqlite_state(path)["stat1"]
        assert statistics == [row for row in old_state["stat1"] if "autoindex" not in str(row[1])]
        assert len(statistics) == 9  # the table's four indexes, the outbox's five

    assert _migrate(empty_db_url, BEFORE, down=True) == old
    if sqlite:
        assert _sqlite_state(path) == old_state  # the same CREATE statements, statistics
