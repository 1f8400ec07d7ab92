"""The trust boundary of drop --purge: each directory is checked right before its own
delete, and deleted without following a link, so a path swapped for a link meanwhile
deletes nothing outside the warehouse roots (docs/operations.md, "Warehouse roots")."""

from __future__ import annotations

import shutil
from pathlib import Path

from hcat_notify import Catalog, drop_partitions, drop_table, register_partitions
from hcat_notify.config import load_settings


def _data(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "part-0").write_text("x")
    return directory


def test_drop_partitions_purge_rechecks_each_directory_before_its_delete(
    db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    warehouse = narrow_warehouse
    table = warehouse / "c"
    first, second = _data(table / "p=1"), _data(table / "d" / "data")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        catalog.create_table("web.c", location=str(table), partition_keys=["g", "p"])
        register_partitions(
            catalog,
            "web.c",
            [({"g": "1", "p": "1"}, str(first)), ({"g": "1", "p": "2"}, str(second))],
        )

        def swap(done: int, total: int, item: str) -> None:
            if done == 1:  # a writer of the table swaps a directory of it for a link
                shutil.rmtree(table / "d")
                (table / "d").symlink_to(victim)

        _, purge = drop_partitions(catalog, "web.c", {"g": "1"}, purge=True, progress=swap)
    assert (victim / "data" / "precious.txt").read_text() == "keep me\n"
    assert purge.deleted == [f"file://{first}"]
    (kept,) = purge.kept
    assert kept.startswith(f"file://{second}: ")
    assert purge.errors == []
    assert not first.exists()


def test_drop_table_purge_never_deletes_its_root_through_a_swapped_link(
    db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    (victim / "t").mkdir()
    (victim / "t" / "precious.txt").write_text("keep me too\n")
    warehouse = narrow_warehouse
    table = warehouse / "x" / "t"
    inside = _data(table / "p=1")
    outside = _data(warehouse / "o" / "p=2")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(table), partition_keys=["p"])
        register_partitions(
            catalog, "web.t", [({"p": "1"}, str(inside)), ({"p": "2"}, str(outside))]
        )

        def swap(done: int, total: int, item: str) -> None:
            # after the partitions outside the root, before the root: its parent -> a link
            (warehouse / "x").rename(warehouse / "x-moved")
            (warehouse / "x").symlink_to(victim)

        _, purge = drop_table(catalog, "web.t", purge=True, progress=swap)
    assert (victim / "t" / "precious.txt").read_text() == "keep me too\n"
    assert purge.deleted == [f"file://{outside}"]
    (kept,) = purge.kept
    assert kept.startswith(f"{table}: ")
    assert "outside the warehouse roots" in kept  # checked again right before its delete
    assert (warehouse / "x-moved" / "t" / "p=1" / "part-0").exists()


def test_drop_table_purge_deletes_a_link_inside_its_directory_not_its_target(
    db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    warehouse = narrow_warehouse
    table = warehouse / "l"
    partition = _data(table / "p=1")
    (partition / ".cache").symlink_to(victim)
    (table / "shortcut").symlink_to(victim / "data" / "precious.txt")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        catalog.create_table("web.l", location=str(table), partition_keys=["p"])
        register_partitions(catalog, "web.l", [({"p": "1"}, str(partition))])
        _, purge = drop_table(catalog, "web.l", purge=True)
    assert purge.deleted == [str(table)]
    assert not table.exists()
    assert (victim / "data" / "precious.txt").read_text() == "keep me\n"
