"""Migration 0023 (SQLite and PostgreSQL): the locations an older version stored as
given (``local:/x``, ``LOCAL:///x``, ``file:/x``, ``file://localhost/x``, through a
symlink, another host's ``file://h/x``) are rewritten to the spelling the current code
stores and keyed, so that the overlap checks and a purge's holders see them
(docs/operations.md, "Warehouse roots"; docs/installing.md, "Upgrading")."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.lifecycle import drop_partitions, drop_table
from hcat_notify.store import Catalog
from hcat_notify.store.engine import alembic_config, open_engine, upgrade
from hcat_notify.store.revision import SCHEMA_REVISION
from tests.revisions import catalog_at

pytestmark = pytest.mark.integration

_AT = "'2026-11-01 00:00:00'"


def _table(table_id: int, name: str, location: str) -> str:
    return (
        "INSERT INTO hcat_tables (id, db_name, table_name, location, storage_format,"
        " partition_keys, table_type, properties, retention_seconds, created_at, updated_at,"
        f" version, topic) VALUES ({table_id}, 'web', '{name}', '{location}', 'parquet',"
        f" '[\"p\"]', 'MANAGED_TABLE', '{{}}', 604800, {_AT}, {_AT}, 1, 'hcat.web.{name}')"
    )


def _partition(row_id: int, table_id: int, value: str, location: str) -> str:
    return (
        "INSERT INTO hcat_partitions (id, table_id, partition_values, path_spec, location,"
        " job_id, file_count, total_bytes, archived, event_id, created_at, updated_at,"
        f" version) VALUES ({row_id}, {table_id}, '[\"{value}\"]', 'p={value}', '{location}',"
        f" NULL, 1, 8, FALSE, NULL, {_AT}, {_AT}, 1)"
    )


def _select(url: str, query: str) -> list[tuple[object, ...]]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()


def _data(directory: Path, what: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part-0.parquet").write_text(what)
    return directory / "part-0.parquet"


def test_the_upgrade_rewrites_old_spellings_and_keys_every_location(
    empty_db_url: str, tmp_path: Path
) -> None:
    wh = tmp_path / "wh"
    (wh / "f").mkdir(parents=True)
    link = tmp_path / "lnk"
    link.symlink_to(wh)
    expected = [  # (stored by an older version, after the upgrade, its key)
        (f"local:{wh}/a", f"file://{wh}/a", f"file://{wh}/a"),
        (f"LOCAL://{wh}/b/", f"file://{wh}/b", f"file://{wh}/b"),
        (f"file:{wh}/c", f"file://{wh}/c", f"file://{wh}/c"),
        (f"file://localhost{wh}/d", f"file://{wh}/d", f"file://{wh}/d"),
        (f"{link}/f", f"{wh}/f", f"file://{wh}/f"),
        ("hdfs://NN:8020/w/g/", "hdfs://NN:8020/w/g", "hdfs://nn/w/g"),
        ("s3a://bucket/w/s/", "s3a://bucket/w/s", "s3:///bucket/w/s"),
        # refused today: kept as stored, never dropped
        (f"file://otherhost{wh}/e", f"file://otherhost{wh}/e", f"file://{wh}/e"),
        ("LOCAL://x", "LOCAL://x", ""),
        ("rel/t", "rel/t", ""),
    ]
    statements = [_table(i, f"t{i}", old) for i, (old, _, _) in enumerate(expected, start=1)]
    statements += [
        _partition(1, 1, "in", f"local:{wh}/a/p=in"),  # inside its table: no outside key
        _partition(2, 1, "out", f"file:{link}/elsewhere/p=out/"),
        _partition(3, 1, "rel", "rel/p=rel"),
        _partition(4, 6, "har", "har://hdfs-NN:8020/w/g/p=har/x.har/inner"),
        _partition(5, 8, "host", f"file://otherhost{wh}/e/p=host"),
    ]
    catalog_at(empty_db_url, "0022", *statements)
    engine = open_engine(empty_db_url)
    try:
        assert upgrade(engine) == ("0022", SCHEMA_REVISION)
        with engine.connect() as connection:
            indexes = {
                index["name"]: index["column_names"]
                for table in ("hcat_tables", "hcat_partitions")
                for index in inspect(connection).get_indexes(table)
            }
    finally:
        engine.dispose()
    assert indexes["ix_hcat_tables_location_key"] == ["location_key"]
    assert indexes["ix_hcat_partitions_outside_key"] == ["outside_key"]
    tables = _select(empty_db_url, "SELECT location, location_key FROM hcat_tables ORDER BY id")
    assert tables == [(new, key) for _, new, key in expected]
    assert _select(
        empty_db_url, "SELECT location, outside_key FROM hcat_partitions ORDER BY id"
    ) == [
        (f"file://{wh}/a/p=in", None),
        (f"file://{wh}/elsewhere/p=out", f"file://{wh}/elsewhere/p=out"),
        ("rel/p=rel", None),
        ("har://hdfs-NN:8020/w/g/p=har/x.har/inner", None),
        (f"file://otherhost{wh}/e/p=host", None),
    ]
    engine = open_engine(empty_db_url)
    try:  # the downgrade drops the keys; the locations stay canonical
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection, None), "0022")
            columns = {c["name"] for c in inspect(connection).get_columns("hcat_tables")}
            columns |= {c["name"] for c in inspect(connection).get_columns("hcat_partitions")}
        assert {"location_key", "outside_key"}.isdisjoint(columns)
    finally:
        engine.dispose()
    tables = _select(empty_db_url, "SELECT location FROM hcat_tables ORDER BY id")
    assert tables == [(new,) for _, new, _ in expected]


def test_a_purge_after_the_upgrade_keeps_data_held_under_an_old_spelling(
    empty_db_url: str, tmp_path: Path
) -> None:
    # third review, MEDIUM: holders stored as local:/x or file://otherhost/x were not
    # seen as containing a directory, and a purge deleted their data
    wh = tmp_path / "wh"
    old = _data(wh / "old" / "p=1", "old's data")
    hosted = _data(wh / "hosted" / "p=1", "another host's data, maybe this one's")
    catalog_at(
        empty_db_url,
        "0022",
        _table(1, "old", f"local:{wh}/old"),
        _table(2, "hosted", f"file://otherhost{wh}/hosted"),
        _table(3, "new", f"{wh}/new"),
        # registered by an older version, inside the other tables' directories
        _partition(1, 3, "1", f"{wh}/old/p=1"),
        _partition(2, 3, "2", f"{wh}/hosted/p=1"),
    )
    engine = open_engine(empty_db_url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    settings = load_settings(home=tmp_path / "home", db_url=empty_db_url, warehouse_roots=[str(wh)])
    with Catalog.open(settings) as catalog:
        _, purged = drop_partitions(catalog, "web.new", {"p": "1"}, purge=True)
        assert purged.deleted == []
        assert f"lies inside table web.old (file://{wh}/old)" in purged.kept[0]
        _, purged = drop_partitions(catalog, "web.new", {"p": "2"}, purge=True)
        assert purged.deleted == []
        assert "lies inside table web.hosted" in purged.kept[0]
        # another host's location: its own purge never deletes it
        _, purged = drop_table(catalog, "web.hosted", purge=True)
        assert purged.deleted == []
        assert "names another host" in purged.kept[-1]
    assert old.read_text() == "old's data"
    assert hosted.read_text() == "another host's data, maybe this one's"


def test_an_old_tilde_location_is_keyed_and_a_relative_one_is_reported_and_kept(
    empty_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # review 6, finding 1: an older version stored "~/..." and relative partition
    # locations as given; 0023 keyed them "", so a table created around them was
    # accepted, and a purge (theirs or that table's) deleted their data
    wh = tmp_path / "wh"
    tilde = _data(wh / "x" / "p=1", "b's data under ~")
    relative = _data(wh / "y" / "p=2", "b's data, relative")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(wh)  # where the relative path resolves, for whoever reads it here
    catalog_at(
        empty_db_url,
        "0022",
        _table(1, "b", f"{wh}/b"),
        _partition(1, 1, "1", "~/wh/x/p=1"),
        _partition(2, 1, "2", "y/p=2"),
    )
    engine = open_engine(empty_db_url)
    try:
        with caplog.at_level("WARNING"):
            upgrade(engine)
    finally:
        engine.dispose()
    assert _select(
        empty_db_url, "SELECT location, outside_key FROM hcat_partitions ORDER BY id"
    ) == [(f"{wh}/x/p=1", f"file://{wh}/x/p=1"), ("y/p=2", None)]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("partition p=2 of table web.b is at 'y/p=2'" in w for w in warnings), warnings
    settings = load_settings(home=tmp_path / "home", db_url=empty_db_url, warehouse_roots=[str(wh)])
    with Catalog.open(settings) as catalog:
        with pytest.raises(InvalidInputError, match=r"web\.b"):
            catalog.create_table("web.c", location=str(wh / "x"), partition_keys=["p"])
        _, purged = drop_partitions(catalog, "web.b", {"p": "2"}, purge=True)
        assert purged.deleted == []
        assert "names no directory the catalog can key" in purged.kept[0]
    assert tilde.read_text() == "b's data under ~"
    assert relative.read_text() == "b's data, relative"
