"""Export and import without Spark: the manifest, bad input, --replace, crash recovery."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hcat_notify import register_partitions
from hcat_notify.cli import main
from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import InvalidInputError, PartitionExistsError, TableNotFoundError
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog
from spark_output.commit import committer as committer_module
from spark_output.transfer import ChecksumMismatchError, ManifestError, export_table, import_table
from tests.counts import row_counts
from tests.spark_output.crashes import SimulatedCrash, crash_after_moves
from tests.wire import validator

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", db_url=db_url)


@pytest.fixture
def catalog(settings: Settings):
    with Catalog.open(settings) as opened:
        yield opened


@pytest.fixture
def export(catalog: Catalog, tmp_path: Path) -> Path:
    """An export of web.src (2 partitions of CSV files) at tmp_path/export."""
    root = tmp_path / "src"
    catalog.create_table(
        "web.src", location=str(root), partition_keys=["ds", "region"], storage_format="csv"
    )
    for ds, region, text in (("1", "us", "a,1\n"), ("1", "a/b", "b,2\nc,3\n")):
        where = root / f"ds={ds}" / f"region={region.replace('/', '%2F')}"
        where.mkdir(parents=True)
        (where / "part-0.csv").write_text(text)
        register_partitions(
            catalog, "web.src", {f"ds={ds}/region={region.replace('/', '%2F')}": str(where)}
        )
    export_table(catalog, "web.src", to=str(tmp_path / "export"))
    return tmp_path / "export"


_counts = row_counts


def test_the_manifest_is_written_last_and_matches_its_schema(catalog: Catalog, export: Path):
    manifest = json.loads((export / "_hcat_export.json").read_text())
    validator("export_manifest.schema.json").validate(manifest)
    assert manifest["partitionKeys"] == ["ds", "region"]
    assert [p["spec"] for p in manifest["partitions"]] == ["ds=1/region=a%2Fb", "ds=1/region=us"]
    first = manifest["partitions"][0]["files"][0]
    assert (first["path"], first["size"]) == ("part-0.csv", 8)
    assert (export / "data" / "ds=1" / "region=a%2Fb" / "part-0.csv").read_text() == "b,2\nc,3\n"
    with pytest.raises(InvalidInputError, match="already holds an export"):
        export_table(catalog, "web.src", to=str(export))


def test_import_as_a_new_table_then_again_then_replace(catalog: Catalog, export: Path, tmp_path):
    target = tmp_path / "dst"
    first = import_table(catalog, str(export), target="web.dst", location=str(target))
    assert first.table_created
    assert sorted(first.partitions_created) == ["ds=1/region=a%2Fb", "ds=1/region=us"]
    assert (target / "ds=1" / "region=a%2Fb" / "part-0.csv").read_text() == "b,2\nc,3\n"
    assert not (target / "_hcat_staging").exists()
    before = _counts(catalog)
    again = import_table(catalog, str(export), target="web.dst")
    assert again.already_imported
    assert _counts(catalog) == before
    # the source table itself: its partitions exist, refused unless --replace
    with pytest.raises(PartitionExistsError, match="--replace"):
        import_table(catalog, str(export))
    assert _counts(catalog) == before
    replaced = import_table(catalog, str(export), replace=True)
    assert len(replaced.partitions_replaced) == 2
    inserts = [e for e in catalog.outbox.events(limit=100) if e.event_type is EventType.INSERT]
    assert [json.loads(e.body)["replace"] for e in inserts] == [True, True]


def test_bad_exports_change_nothing(catalog: Catalog, export: Path, tmp_path: Path):
    catalog.create_table("web.other", location=str(tmp_path / "o"), partition_keys=["day"])
    before = _counts(catalog)
    with pytest.raises(ManifestError, match=r"_hcat_export\.json is missing"):
        import_table(catalog, str(tmp_path / "nowhere"), target="web.x")
    with pytest.raises(InvalidInputError, match="partition keys"):
        import_table(catalog, str(export), target="web.other")
    (export / "data" / "ds=1" / "region=us" / "part-0.csv").write_text("a,2\n")  # same size
    with pytest.raises(ChecksumMismatchError, match=r"data/ds=1/region=us/part-0\.csv"):
        import_table(catalog, str(export), target="web.x", location=str(tmp_path / "x"))
    with pytest.raises(InvalidInputError, match="exists but is not a registered partition"):
        import_table(catalog, str(export), target="web.y", location=str(tmp_path / "src"))
    manifest = export / "_hcat_export.json"
    data = json.loads(manifest.read_text())
    del data["partitions"][0]["files"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="corrupt export manifest"):
        import_table(catalog, str(export), target="web.x", location=str(tmp_path / "x"))
    manifest.write_text("{not json")
    with pytest.raises(ManifestError, match="corrupt"):
        import_table(catalog, str(export), target="web.x", location=str(tmp_path / "x"))
    assert _counts(catalog) == before
    assert not (tmp_path / "x").exists()
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.x")


def test_an_import_interrupted_after_its_moves_is_finished_by_recover(
    catalog: Catalog, export: Path, tmp_path: Path, monkeypatch, db_url: str, capsys
):
    with crash_after_moves(), pytest.raises(SimulatedCrash):
        import_table(catalog, str(export), target="web.dst", location=str(tmp_path / "dst"))
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.dst")  # not registered until the transaction that completes it
    assert (tmp_path / "dst" / "ds=1" / "region=us" / "part-0.csv").exists()  # moved
    code = main(["--db-url", db_url, "-o", "json", "recover", "web.dst", "--force"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)[0]["action"] == "rolled forward"
    assert len(catalog.list_partitions("web.dst")) == 2
    kinds = [e.event_type for e in catalog.outbox.events(limit=100) if e.table == "web.dst"]
    assert kinds == [EventType.CREATE_TABLE, EventType.ADD_PARTITION, EventType.ADD_PARTITION]
    assert catalog.commits.pending() == []  # the staging entry went with it


def test_export_and_import_commands(db_url: str, export: Path, tmp_path: Path, capsys):
    code = main(
        [
            "--db-url",
            db_url,
            "-o",
            "json",
            "import",
            str(export),
            "--as",
            "web.cli",
            "--location",
            str(tmp_path / "cli"),
            "--mark-done",
            "ds=1",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["table_created"]
    assert summary["done_event_id"] is not None
    code = main(["--db-url", db_url, "export", "web.cli", "ds=1", "--to", str(export)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("hcat-notify: error: ")
    assert "already holds an export" in err
    code = main(["--db-url", db_url, "import", str(tmp_path / "none")])
    assert code == 2
    assert "is missing" in capsys.readouterr().err


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def _cli(capsys, db_url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--db-url", db_url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, db_url: str, *args: str) -> str:
    """Run a command that must be refused: exit 2, one line on stderr, nothing on stdout."""
    code, out, err = _cli(capsys, db_url, *args)
    assert (code, out) == (2, ""), err
    assert err.startswith("hcat-notify: error: ")
    assert err.count("\n") == 1, err
    return err


def test_export_refuses_a_file_a_spec_matching_nothing_and_the_table_itself(
    capsys, db_url: str, export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    source = tmp_path / "src"
    table_files = _files(source)
    # no destination: not the current directory, not a directory named " "
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for empty in ("", " "):
        err = _refused(capsys, db_url, "export", "web.src", "--to", empty)
        assert f"an export needs a destination directory (a path or URI), not {empty!r}" in err
    assert list(cwd.iterdir()) == []
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    err = _refused(capsys, db_url, "export", "web.src", "--to", str(a_file))
    assert "it is a file, not a directory" in err
    assert a_file.read_text() == "keep me"
    err = _refused(capsys, db_url, "export", "web.src", "--to", str(a_file / "sub"))
    assert "cannot export to" in err

    # a spec matching nothing: the same answer into a new and into an existing directory
    existing = tmp_path / "existing"
    existing.mkdir()
    new = _refused(capsys, db_url, "export", "web.src", "ds=9", "--to", str(tmp_path / "new"))
    old = _refused(capsys, db_url, "export", "web.src", "ds=9", "--to", str(existing))
    assert (
        new == old == "hcat-notify: error: no partition of web.src matches ds=9; nothing exported\n"
    )
    assert not (tmp_path / "new").exists()
    assert list(existing.iterdir()) == []

    # into the table's location, inside it, or around it
    for inside in (source, source / "exports", source / "ds=1" / "x", tmp_path):
        err = _refused(capsys, db_url, "export", "web.src", "--to", str(inside))
        assert f"overlaps {source}, where web.src keeps its files" in err
    assert _files(source) == table_files
    code, _, err = _cli(capsys, db_url, "partitions", "discover", "web.src")
    assert code == 0, err

    # a new directory, even a nested one, is created
    code, out, err = _cli(
        capsys, db_url, "export", "web.src", "ds=1", "--to", str(tmp_path / "n" / "e")
    )
    assert code == 0, err
    assert out.startswith("exported 2 partition(s) of web.src, 2 file(s)")
    assert (tmp_path / "n" / "e" / "_hcat_export.json").is_file()


def _refused_import(capsys, catalog: Catalog, db_url: str, export: Path, *args: str) -> str:
    """An import that must be refused: one line, exit 2, and nothing registered,
    announced or journalled."""
    before = _counts(catalog)
    err = _refused(capsys, db_url, "import", str(export), *args)
    assert _counts(catalog) == before
    return err


def test_an_export_entry_that_is_a_link_is_refused_and_nothing_copied(
    capsys, catalog: Catalog, db_url: str, export: Path, tmp_path: Path
):
    source = tmp_path / "src"
    table_files = _files(source)
    outside = tmp_path / "outside"
    (outside / "region=us").mkdir(parents=True)
    (outside / "region=us" / "part-0.csv").write_text("a,1\n")  # the manifest's checksum
    data = export / "data" / "ds=1"
    target = tmp_path / "dst"

    # a file that is a link to a file outside the export, with a matching checksum
    (data / "region=us" / "part-0.csv").unlink()
    (data / "region=us" / "part-0.csv").symlink_to(outside / "region=us" / "part-0.csv")
    err = _refused_import(
        capsys, catalog, db_url, export, "--as", "web.dst", "--location", str(target)
    )
    assert "data/ds=1/region=us/part-0.csv is a symbolic link" in err
    assert not target.exists()
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.dst")

    # a directory that is a link out of the export; into the existing table, --replace
    (data / "region=us").rename(tmp_path / "moved-away")
    (data / "region=us").symlink_to(outside / "region=us", target_is_directory=True)
    err = _refused_import(capsys, catalog, db_url, export, "--replace")
    assert "data/ds=1/region=us is a symbolic link" in err
    assert _files(source) == table_files

    # the manifest itself
    (data / "region=us").unlink()
    (tmp_path / "moved-away").rename(data / "region=us")
    (outside / "_hcat_export.json").write_bytes((export / "_hcat_export.json").read_bytes())
    (export / "_hcat_export.json").unlink()
    (export / "_hcat_export.json").symlink_to(outside / "_hcat_export.json")
    err = _refused_import(
        capsys, catalog, db_url, export, "--as", "web.dst", "--location", str(target)
    )
    assert "_hcat_export.json is a symbolic link" in err
    assert not target.exists()
    assert [e.table for e in catalog.outbox.events(limit=100) if e.table == "web.dst"] == []


def _rewrite(export: Path, change) -> None:
    manifest = export / "_hcat_export.json"
    data = json.loads(manifest.read_text())
    change(data)
    manifest.write_text(json.dumps(data))


def test_a_manifest_with_repeated_or_inconsistent_entries_is_refused_up_front(
    capsys, catalog: Catalog, db_url: str, export: Path, tmp_path: Path
):
    original = (export / "_hcat_export.json").read_text()
    target = tmp_path / "dst"
    new_table = ("--as", "web.dst", "--location", str(target))

    def same_file_three_times(data):
        files = data["partitions"][1]["files"]
        files[:] = files * 3
        data["partitions"][1]["fileCount"] = 3
        data["partitions"][1]["bytes"] *= 3

    def same_partition(times: int):
        def change(data):
            data["partitions"] = data["partitions"][:1] * times + data["partitions"][1:]

        return change

    def values_disagree(data):
        data["partitions"][1]["values"] = {"ds": "2", "region": "us"}

    def count_disagrees(data):
        data["partitions"][1]["fileCount"] = 2

    def file_and_directory(data):
        files = data["partitions"][1]["files"]
        files.append({**files[0], "path": "part-0.csv/inner"})
        data["partitions"][1]["fileCount"] = 2
        data["partitions"][1]["bytes"] *= 2

    cases = [
        (same_file_three_times, "file ds=1/region=us/part-0.csv is listed 3 times"),
        (same_partition(3), r"partition ds=1/region=a%2Fb is listed 3 times"),
        (same_partition(100_000), r"partition ds=1/region=a%2Fb is listed 100000 times"),
        (values_disagree, 'partition ds=1/region=us has values {"ds": "2", "region": "us"}'),
        (count_disagrees, "partition ds=1/region=us says 2 file(s)"),
        (file_and_directory, "ds=1/region=us/part-0.csv is listed both as a file and as a"),
    ]
    for change, message in cases:
        (export / "_hcat_export.json").write_text(original)
        _rewrite(export, change)
        for args in (new_table, ("--replace",)):
            err = _refused_import(capsys, catalog, db_url, export, *args)
            assert err.startswith("hcat-notify: error: corrupt export manifest: "), err
            assert message in err
            assert not target.exists()
    assert catalog.commits.pending() == []
    assert _cli(capsys, db_url, "recover")[1] == "nothing to recover\n"


# Runs the real command line in a process that stops for good after its first copy, so
# that the test can kill -9 it mid-copy: the copies are otherwise too quick to catch.
_IMPORT_THAT_HANGS = """
import sys, threading
from spark_output.transfer import importer
real = importer.copy_stream
def copy_then_hang(*args):
    result = real(*args)
    print("copied", flush=True)
    threading.Event().wait()
    return result
importer.copy_stream = copy_then_hang
from hcat_notify.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _hcat_notify(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hcat_notify.cli", "--db-url", db_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_staging_of_an_import_killed_mid_copy_is_removed_by_recover(
    catalog: Catalog, db_url: str, export: Path, tmp_path: Path
):
    target = tmp_path / "dst"
    command = [sys.executable, "-c", _IMPORT_THAT_HANGS, "--db-url", db_url, "import"]
    args = [str(export), "--as", "web.dst", "--location", str(target)]
    with subprocess.Popen([*command, *args], stdout=subprocess.PIPE, text=True) as importing:
        assert importing.stdout is not None
        ready, _, _ = select.select([importing.stdout], [], [], 120)
        assert ready, "the import did not copy its first file within 120 s"
        assert importing.stdout.readline() == "copied\n"
        os.kill(importing.pid, signal.SIGKILL)
        assert importing.wait(timeout=60) == -signal.SIGKILL
    staged = [path for path in target.rglob("*") if path.is_file()]
    assert [path.name for path in staged] == ["part-0.csv"]  # one copied, in staging
    assert "_hcat_staging" in staged[0].parts

    recovered = _hcat_notify(db_url, "-o", "json", "recover")
    assert recovered.returncode == 0, recovered.stderr
    [outcome] = json.loads(recovered.stdout)
    assert (outcome["table"], outcome["action"]) == ("web.dst", "rolled back")
    assert [path for path in target.rglob("*") if not path.is_dir()] == []
    assert not (target / "_hcat_staging").exists()
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.dst")
    assert [e for e in catalog.outbox.events(limit=100) if e.table == "web.dst"] == []
    assert _hcat_notify(db_url, "recover").stdout == "nothing to recover\n"

    # the import runs again, from the start
    again = _hcat_notify(db_url, "-o", "json", "import", *args)
    assert again.returncode == 0, again.stderr
    assert sorted(json.loads(again.stdout)["partitions_created"]) == [
        "ds=1/region=a%2Fb",
        "ds=1/region=us",
    ]
    assert (target / "ds=1" / "region=us" / "part-0.csv").read_text() == "a,1\n"
    assert not (target / "_hcat_staging").exists()


def test_recover_removes_the_staging_an_import_left_after_its_commit(
    catalog: Catalog, export: Path, tmp_path: Path, monkeypatch, db_url: str, capsys
):
    def crash(self) -> None:
        raise SimulatedCrash("killed while removing the staging")

    monkeypatch.setattr(committer_module.PartitionCommitter, "cleanup", crash)
    with pytest.raises(SimulatedCrash):
        import_table(catalog, str(export), target="web.dst", location=str(tmp_path / "dst"))
    monkeypatch.undo()
    assert len(catalog.list_partitions("web.dst")) == 2  # committed
    assert (tmp_path / "dst" / "_hcat_staging").exists()
    code, out, err = _cli(capsys, db_url, "recover", "--force")
    assert (code, out) == (0, "nothing to recover\n"), err  # nothing to roll either way
    assert not (tmp_path / "dst" / "_hcat_staging").exists()
    assert catalog.commits.pending() == []
    assert len(catalog.list_partitions("web.dst")) == 2


def test_an_import_outside_the_warehouse_roots_is_refused_before_anything_is_copied(
    catalog: Catalog, export: Path, db_url: str, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", str(tmp_path / "wh"))
    narrow = load_settings(home=tmp_path / "home", db_url=db_url)
    before = _counts(catalog)
    with Catalog.open(narrow) as restricted:
        for location, problem in [
            (tmp_path / "finance", "is outside the warehouse roots"),
            (f"{tmp_path}/wh/../finance", "has a '..' segment"),
        ]:
            with pytest.raises(InvalidInputError, match=problem):
                import_table(restricted, str(export), target="web.x", location=str(location))
        # into the existing source table, registered before the roots were narrowed
        with pytest.raises(InvalidInputError, match="is outside the warehouse roots"):
            import_table(restricted, str(export), replace=True)
    assert _counts(catalog) == before
    assert not (tmp_path / "finance").exists()
    code = main(
        [
            "--db-url",
            db_url,
            "import",
            str(export),
            "--as",
            "web.x",
            "--location",
            str(tmp_path / "finance"),
        ]
    )
    assert code == 2
    assert not (tmp_path / "finance").exists()
