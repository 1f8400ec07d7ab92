"""Export and import at the trust boundary (docs/operations.md, "Warehouse roots"): an
export writes only new files into a new or empty directory apart from every table and
root, never through a link, and reads no data file through one; an import takes no
location or table type from the manifest that the operator did not give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hcat_notify import register_partitions
from hcat_notify.cli import main
from hcat_notify.errors import InvalidInputError, LinkInPartitionError
from hcat_notify.store import Catalog
from spark_output.transfer import export_table

pytestmark = pytest.mark.integration

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
"""For checks of files alone: one backend is enough."""


def _table(catalog: Catalog, name: str, root: Path, *specs: str) -> None:
    """A table at ``root`` with a ``part-0.csv`` in each partition ``specs``."""
    catalog.create_table(name, location=str(root), partition_keys=["ds"], storage_format="csv")
    for spec in specs:
        (root / spec).mkdir(parents=True)
        (root / spec / "part-0.csv").write_text(f"{name},{spec}\n")
        register_partitions(catalog, name, {spec: str(root / spec)})


def _tree(root: Path) -> dict[str, str]:
    """Every entry below ``root``: a file's text, a link's target."""
    return {
        str(path.relative_to(root)): (
            f"-> {os.readlink(path)}" if path.is_symlink() else path.read_text()
        )
        for path in sorted(root.rglob("*"))
        if path.is_symlink() or path.is_file()
    }


def _refused(capsys, db_url: str, *args: str) -> str:
    code = main(["--db-url", db_url, *args])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.startswith("hcat-notify: error: "), err
    assert err.count("\n") == 1, err
    return err


@sqlite_only
def test_export_refuses_a_destination_holding_anything_and_writes_nothing(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path
):
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    victim = tmp_path / "victim_file"
    victim.write_text("precious\n")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    # (a) a link planted where the export writes a file; (b) its data directory a link
    planted = tmp_path / "exp_link"
    (planted / "data" / "ds=1").mkdir(parents=True)
    (planted / "data" / "ds=1" / "part-0.csv").symlink_to(victim)
    linked = tmp_path / "exp_link2"
    linked.mkdir()
    (linked / "data").symlink_to(victim_dir, target_is_directory=True)
    for destination in (planted, linked):
        before = _tree(destination)
        err = _refused(capsys, db_url, "export", "web.a", "--to", str(destination))
        assert "it is not empty" in err
        assert "nothing written" in err
        assert _tree(destination) == before
    assert victim.read_text() == "precious\n"
    assert list(victim_dir.iterdir()) == []
    # a new directory, and an empty one, are what an export writes to
    (tmp_path / "empty").mkdir()
    for destination in (tmp_path / "new" / "export", tmp_path / "empty"):
        export_table(catalog, "web.a", to=str(destination))
        assert (destination / "data" / "ds=1" / "part-0.csv").read_text() == "web.a,ds=1\n"
        assert (destination / "_hcat_export.json").is_file()


def test_export_refuses_another_tables_location_and_a_warehouse_root(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path, monkeypatch
):
    warehouse = tmp_path / "warehouse"
    _table(catalog, "web.a", warehouse / "a", "ds=1")
    # web.b lives at <warehouse>/proj/data: an export to <warehouse>/proj would write
    # its data/ds=1/part-0.csv over web.b's file
    _table(catalog, "web.b", warehouse / "proj" / "data", "ds=1")
    other = warehouse / "proj" / "data" / "ds=1" / "part-0.csv"
    for destination, named in (
        (warehouse / "proj", "web.b"),  # around it
        (warehouse / "proj" / "data", "web.b"),  # at it
        (warehouse / "proj" / "data" / "ds=2", "web.b"),  # inside it
        (warehouse / "a" / "exports", "web.a"),  # inside the exported table itself
    ):
        err = _refused(capsys, db_url, "export", "web.a", "--to", str(destination))
        assert f"where {named} keeps its files" in err, err
    assert other.read_text() == "web.b,ds=1\n"
    assert not (warehouse / "proj" / "_hcat_export.json").exists()
    assert not (warehouse / "proj" / "data" / "ds=2").exists()
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", f"{warehouse},{tmp_path / 'w2'}")
    for destination in (tmp_path / "w2", tmp_path):
        err = _refused(capsys, db_url, "export", "web.a", "--to", str(destination))
        assert "warehouse root" in err or "keeps its files" in err, err
    assert not (tmp_path / "w2").exists()


@sqlite_only
def test_a_link_planted_during_the_export_is_not_followed(catalog: Catalog, tmp_path: Path):
    _table(catalog, "web.a", tmp_path / "a", "ds=1", "ds=2")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    victim = tmp_path / "victim_file"
    victim.write_text("precious\n")
    destination = tmp_path / "export"

    def plant(done: int, total: int, item: str) -> None:
        if done == 1:  # after ds=1's file: ds=2's directory, then a file, become links
            (destination / "data" / "ds=2").symlink_to(victim_dir, target_is_directory=True)

    with pytest.raises(InvalidInputError, match=r"data/ds=2 appeared meanwhile or is a link"):
        export_table(catalog, "web.a", to=str(destination), progress=plant)
    assert list(victim_dir.iterdir()) == []
    assert not (destination / "_hcat_export.json").exists()

    other = tmp_path / "export2"

    def plant_file(done: int, total: int, item: str) -> None:
        if done == 1:
            (other / "data" / "ds=2").mkdir()
            (other / "data" / "ds=2" / "part-0.csv").symlink_to(victim)

    with pytest.raises(InvalidInputError, match=r"data/ds=2 appeared meanwhile"):
        export_table(catalog, "web.a", to=str(other), progress=plant_file)
    assert victim.read_text() == "precious\n"
    assert not (other / "_hcat_export.json").exists()


@sqlite_only
def test_export_refuses_a_partition_holding_a_link_and_reads_nothing_through_it(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path
):
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    secret = tmp_path / "outside_secret.txt"
    secret.write_text("outside: private\n")
    (tmp_path / "a" / "ds=1" / "part-9.csv").symlink_to(secret)  # planted after registration
    err = _refused(capsys, db_url, "export", "web.a", "--to", str(tmp_path / "exp"))
    assert "ds=1/part-9.csv is a symbolic link" in err
    assert not (tmp_path / "exp").exists()
    with pytest.raises(LinkInPartitionError):
        export_table(catalog, "web.a", to=str(tmp_path / "exp"))
    assert not (tmp_path / "exp").exists()
