"""Export and import at the trust boundary (docs/operations.md, "Warehouse roots"): an
export writes only new files into a new or empty directory apart from every table and
root, never through a link, and reads no data file through one; an import takes no
location or table type from the manifest that the operator did not give."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from hcat_notify import register_partitions
from hcat_notify.cli import main
from hcat_notify.errors import InvalidInputError, LinkInPartitionError, TableNotFoundError
from hcat_notify.store import Catalog
from spark_output.commit.committer import PartitionCommitter
from spark_output.compaction import CompactionPolicy
from spark_output.compaction.har import HarEntry
from spark_output.compaction.har.index import index_bytes
from spark_output.maintenance.table_compaction import compact_table
from spark_output.transfer import export as export_module
from spark_output.transfer import export_table, import_table
from spark_output.transfer.destination import check_destination
from tests.counts import row_counts

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


def _refused(capsys: pytest.CaptureFixture[str], db_url: str, *args: str) -> str:
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
    # (c) the destination's name a link, even to a directory that is not there yet
    dangling = tmp_path / "exp_dangling"
    dangling.symlink_to(victim_dir / "new", target_is_directory=True)
    err = _refused(capsys, db_url, "export", "web.a", "--to", str(dangling))
    assert f"it is a symbolic link (to {victim_dir / 'new'})" in err
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


@sqlite_only
@pytest.mark.parametrize("where", ["partition", "table"])
def test_export_reads_nothing_through_a_directory_swapped_for_a_link(
    capsys, narrow_warehouse: Path, catalog: Catalog, db_url: str, tmp_path: Path, where: str
):
    """A partition's directory, or the table's below the warehouse root, swapped for a
    link to a directory outside whose files bear the partition's names: refused by name,
    nothing exported (fifth security review, finding 1)."""
    _table(catalog, "web.a", narrow_warehouse / "a", "ds=1")
    outside = tmp_path / "outside"
    (outside / "ds=1").mkdir(parents=True)
    for directory in (outside, outside / "ds=1"):
        (directory / "part-0.csv").write_text("outside: private\n")
    link = narrow_warehouse / "a" / "ds=1" if where == "partition" else narrow_warehouse / "a"
    link.rename(link.with_name(f".{link.name}.orig"))
    link.symlink_to(outside, target_is_directory=True)
    err = _refused(capsys, db_url, "export", "web.a", "--to", str(tmp_path / "exp"))
    assert f"{link} is a symbolic link (to {outside})" in err, err
    assert not (tmp_path / "exp").exists()


@sqlite_only
def test_export_reads_no_archive_through_a_directory_swapped_for_a_link(
    narrow_warehouse: Path, catalog: Catalog, tmp_path: Path
):
    """An archived partition's directories are reached from the root as well: the
    table's ``_hcat_compacted`` swapped for a link to a copy outside is refused."""
    _table(catalog, "web.a", narrow_warehouse / "a", "ds=1")
    (narrow_warehouse / "a" / "ds=1" / "part-1.csv").write_text("web.a,ds=1,1\n")
    policy = CompactionPolicy(mode="har", min_files=2)
    assert compact_table(catalog, "web.a", policy=policy, workers=1).partitions_compacted == 1
    compacted = narrow_warehouse / "a" / "_hcat_compacted"
    outside = tmp_path / "outside"
    shutil.copytree(compacted, outside)
    compacted.rename(compacted.with_name(".compacted.orig"))
    compacted.symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkInPartitionError, match=f"{compacted} is a symbolic link"):
        export_table(catalog, "web.a", to=str(tmp_path / "exp"))
    assert not (tmp_path / "exp").exists()


@sqlite_only
def test_a_fifo_in_place_of_a_data_file_refuses_the_export_at_once(
    catalog: Catalog, tmp_path: Path
):
    """A data file swapped for a FIFO after the listing: refused, not waited on (an
    export that opened it blocking would hang for ever; finding 5)."""
    _table(catalog, "web.a", tmp_path / "a", "ds=1", "ds=2")
    swapped = tmp_path / "a" / "ds=2" / "part-0.csv"

    def plant(done: int, total: int, item: str) -> None:
        if done == 1:  # ds=1 copied; ds=2 was listed already
            swapped.rename(swapped.with_name(".part-0.csv.orig"))
            os.mkfifo(swapped)

    with pytest.raises(LinkInPartitionError, match=r"ds=2/part-0\.csv is not a regular file"):
        export_table(catalog, "web.a", to=str(tmp_path / "exp"), progress=plant)
    assert not (tmp_path / "exp" / "_hcat_export.json").exists()


def _archived_export(root: Path, part: str, master: bytes | None = None) -> Path:
    """An export made by hand of web.har: partition ds=1 archived, its archive's one file
    at ``part`` (the review's repro: an absolute path reads a file outside the archive)."""
    archive = root / "data" / "ds=1" / "_hcat_archive.har"
    archive.mkdir(parents=True)
    entries = [
        HarEntry(path="/", is_dir=True, children=("part-0.csv",)),
        HarEntry(path="/part-0.csv", is_dir=False, part=part, offset=0, length=5),
    ]
    index, masterindex = index_bytes(entries)
    (archive / "_index").write_bytes(index)
    (archive / "_masterindex").write_bytes(master or masterindex)
    (archive / "part-0").write_bytes(b"a,1\n\n")
    files: list[dict[str, Any]] = [
        {
            "path": f"_hcat_archive.har/{name}",
            "size": len(data := (archive / name).read_bytes()),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        for name in ("_index", "_masterindex", "part-0")
    ]
    manifest = {
        "format": "hcat-notify-export",
        "version": 1,
        "exportId": f"har-{root.name}",
        "exportedAt": "2026-11-28T00:00:00+00:00",
        "table": {
            "db": "web",
            "table": "har",
            "location": str(root.parent / "warehouse" / "har"),
            "storageFormat": "csv",
            "tableType": "MANAGED_TABLE",
            "properties": {},
            "retentionSeconds": 86400,
        },
        "partitionKeys": ["ds"],
        "partitions": [
            {
                "spec": "ds=1",
                "values": {"ds": "1"},
                "location": "x",
                "archived": True,
                "fileCount": len(files),
                "bytes": sum(item["size"] for item in files),
                "files": files,
            }
        ],
    }
    (root / "_hcat_export.json").write_text(json.dumps(manifest))
    return root


@sqlite_only
def test_import_refuses_an_archive_whose_index_reaches_outside_it(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET\n")
    before = row_counts(catalog)
    for name, part, master, problem in (
        ("abs", str(secret), None, "a part is a file part-N inside the archive"),
        ("up", "../../../../secret.txt", None, "a part is a file part-N inside the archive"),
        ("master", "part-0", b"3 \n0 x y z \n", "malformed _masterindex"),
    ):
        export = _archived_export(tmp_path / name, part, master)
        err = _refused(capsys, db_url, "import", str(export))
        assert f"{export}/data/ds=1/_hcat_archive.har is not a sound archive" in err, err
        assert problem in err, err
        assert "nothing imported" in err
    assert row_counts(catalog) == before
    assert not (narrow_warehouse / "har").exists()
    # the same export with a sound index imports
    export = _archived_export(tmp_path / "sound", "part-0")
    code = main(["--db-url", db_url, "import", str(export)])
    assert code == 0, capsys.readouterr().err
    assert catalog.get_table("web.har").table_type == "MANAGED_TABLE"


def _as_external(export: Path, location: str, table_type: str = "EXTERNAL_TABLE") -> None:
    manifest = export / "_hcat_export.json"
    data = json.loads(manifest.read_text())
    data["table"].update(tableType=table_type, location=location)
    manifest.write_text(json.dumps(data))


@sqlite_only
def test_import_makes_a_managed_table_unless_the_operator_says_external(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    _table(catalog, "web.a", narrow_warehouse / "a", "ds=1")
    export = tmp_path / "export"
    export_table(catalog, "web.a", to=str(export))
    outside = tmp_path / "outside"
    _as_external(export, str(outside))  # the manifest asks for an external table outside
    before = row_counts(catalog)
    err = _refused(capsys, db_url, "import", str(export), "--as", "web.e")
    assert f"the export's table was external, at {outside}" in err
    err = _refused(capsys, db_url, "import", str(export), "--as", "web.e", "--external")
    assert "--external needs --location" in err
    err = _refused(capsys, db_url, "import", str(export), "--external", "--replace")
    assert "--external applies to a new table; web.a exists" in err
    _as_external(export, "file://otherhost/w/t", "MANAGED_TABLE")
    err = _refused(capsys, db_url, "import", str(export), "--as", "web.e")
    assert "names the host 'otherhost'" in err
    err = _refused(
        capsys, db_url, "import", str(export), "--as", "web.e", "--location", "file://h/w/t"
    )
    assert "names the host 'h'" in err
    assert row_counts(catalog) == before
    assert not outside.exists()
    # what the operator names: a managed table inside the roots, an external one anywhere
    for name, options in (
        ("web.m", ["--location", str(narrow_warehouse / "m")]),
        ("web.x", ["--external", "--location", str(tmp_path / "ext")]),
    ):
        code = main(["--db-url", db_url, "import", str(export), "--as", name, *options])
        assert code == 0, capsys.readouterr().err
    assert catalog.get_table("web.m").table_type == "MANAGED_TABLE"
    assert catalog.get_table("web.x").table_type == "EXTERNAL_TABLE"
    assert (tmp_path / "ext" / "ds=1" / "part-0.csv").read_text() == "web.a,ds=1\n"
    assert not outside.exists()


@sqlite_only
def test_an_import_writes_nothing_through_a_link_planted_in_its_staging(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path
):
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    export = tmp_path / "export"
    summary = export_table(catalog, "web.a", to=str(export))
    victim = tmp_path / "victim_file"
    victim.write_text("precious\n")
    # the job id is the export's id and the target table, hashed: predictable
    job = "import-" + hashlib.sha256(f"{summary.export_id}|web.dst".encode()).hexdigest()[:24]
    planted = tmp_path / "dst" / "_hcat_staging" / job / "ds=1"
    planted.mkdir(parents=True)
    (planted / "part-0.csv").symlink_to(victim)
    before = row_counts(catalog)
    args = ("import", str(export), "--as", "web.dst", "--location", str(tmp_path / "dst"))
    err = _refused(capsys, db_url, *args)
    assert f"its staging directory {tmp_path}/dst/_hcat_staging/{job} exists" in err
    assert victim.read_text() == "precious\n"
    assert row_counts(catalog) == before


@sqlite_only
def test_a_link_planted_in_the_staging_during_an_import_is_not_followed(
    catalog: Catalog, tmp_path: Path
):
    _table(catalog, "web.a", tmp_path / "a", "ds=1", "ds=2")
    export = tmp_path / "export"
    export_table(catalog, "web.a", to=str(export))
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    staging = tmp_path / "dst" / "_hcat_staging"

    def plant(done: int, total: int, item: str) -> None:
        if item.startswith("copying ds=1"):  # ds=2's directory becomes a link
            (next(staging.iterdir()) / "ds=2").symlink_to(victim_dir, target_is_directory=True)

    with pytest.raises(InvalidInputError, match=r"ds=2 appeared meanwhile or is a link"):
        import_table(
            catalog, str(export), target="web.dst", location=str(tmp_path / "dst"), progress=plant
        )
    assert victim_dir.is_dir()
    assert list(victim_dir.iterdir()) == []
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.dst")


@sqlite_only
def test_export_refuses_a_link_on_the_way_to_its_destination(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path
):
    # fifth review, finding 3 (t1b): only a link at the final name was refused; one at a
    # directory on the way chose where the export landed (a directory the attacker
    # cannot write, or another table's)
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "drop").mkdir()
    (tmp_path / "drop" / "sub").symlink_to(elsewhere, target_is_directory=True)
    err = _refused(capsys, db_url, "export", "web.a", "--to", str(tmp_path / "drop/sub/exp"))
    assert f"{tmp_path}/drop/sub, on its way, is a symbolic link (to {elsewhere})" in err
    assert "nothing written" in err
    assert list(elsewhere.iterdir()) == []


@sqlite_only
def test_a_parent_swapped_for_a_link_after_the_check_stops_the_export(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # fifth review, finding 3 (t1): the destination was resolved again after the check:
    # a parent swapped for a link in between sent the export into web.b's location
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    _table(catalog, "web.b", tmp_path / "b", "ds=1")
    sub = tmp_path / "drop" / "sub"
    sub.mkdir(parents=True)

    def then_swapped(*args: Any) -> None:
        check_destination(*args)
        sub.rename(sub.with_name("sub.old"))
        sub.symlink_to(tmp_path / "b", target_is_directory=True)

    monkeypatch.setattr(export_module, "check_destination", then_swapped)
    with pytest.raises(InvalidInputError, match=rf"{tmp_path}/drop/sub is a symbolic link"):
        export_table(catalog, "web.a", to=str(sub / "exp"))
    assert _tree(tmp_path / "b") == {"ds=1/part-0.csv": "web.b,ds=1\n"}


def _staging_linked(catalog: Catalog, tmp_path: Path) -> tuple[Path, Path, Path]:
    """web.a exported; web.dst (empty) at ``dst``; an empty directory outside: (export,
    dst, outside)."""
    _table(catalog, "web.a", tmp_path / "a", "ds=1")
    export = tmp_path / "export"
    export_table(catalog, "web.a", to=str(export))
    _table(catalog, "web.dst", tmp_path / "dst")
    (tmp_path / "dst").mkdir()
    outside = tmp_path / "outside_stage"
    outside.mkdir()
    return export, tmp_path / "dst", outside


@sqlite_only
def test_an_import_refuses_a_staging_directory_that_is_a_link(
    capsys, catalog: Catalog, db_url: str, tmp_path: Path
):
    # fifth review, finding 2 (t5): a link at <table>/_hcat_staging was followed (the
    # staging resolved, then created): the import copied the export's data outside the
    # warehouse, then failed, leaving it there
    export, dst, outside = _staging_linked(catalog, tmp_path)
    (dst / "_hcat_staging").symlink_to(outside, target_is_directory=True)
    before = row_counts(catalog)
    err = _refused(capsys, db_url, "import", str(export), "--as", "web.dst")
    assert list(outside.iterdir()) == []
    assert f"cannot write to web.dst: {dst}/_hcat_staging is a symbolic link" in err
    assert row_counts(catalog) == before


@sqlite_only
def test_a_staging_link_planted_after_the_check_is_not_followed(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    export, dst, outside = _staging_linked(catalog, tmp_path)
    journal = PartitionCommitter.journal_staging

    def then_planted(self: PartitionCommitter, **kwargs: Any) -> None:
        journal(self, **kwargs)  # after check_staging_free, before the copy
        (dst / "_hcat_staging").symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(PartitionCommitter, "journal_staging", then_planted)
    with pytest.raises(InvalidInputError, match=rf"{dst}/_hcat_staging is a symbolic link"):
        import_table(catalog, str(export), target="web.dst")
    assert list(outside.iterdir()) == []
    assert catalog.list_partitions("web.dst") == []
    assert catalog.commits.pending() == []
