"""hcat-notify compact: maintenance of existing partitions from the command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hcat_notify.cli import main
from hcat_notify.config import load_settings
from hcat_notify.store import Catalog, NewPartition

pytestmark = pytest.mark.integration


@pytest.fixture
def table(tmp_path: Path, db_url: str):
    root = tmp_path / "t"
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(root), partition_keys=["ds"])
        for ds in ("1", "2"):
            directory = root / f"ds={ds}"
            directory.mkdir(parents=True)
            for n in range(12):
                pq.write_table(
                    pa.table({"id": [n * 10 + i for i in range(10)], "ds_copy": [ds] * 10}),
                    directory / f"part-{n:05d}.parquet",
                )
            catalog.add_partitions(
                "web.t", [NewPartition({"ds": ds}, f"file://{directory}", 12, 0)]
            )
    return root


def _run(capsys, db_url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--db-url", db_url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_then_compact(capsys, db_url: str, table: Path, tmp_path: Path):
    before = sorted(str(p) for p in table.rglob("*"))
    code, out, _ = _run(capsys, db_url, "-o", "json", "compact", "web.t", "--dry-run")
    assert code == 0
    planned = json.loads(out)
    assert (planned["dry_run"], planned["considered"], planned["compacted"]) == (True, 2, 2)
    assert planned["files_before"] == 24
    assert sorted(str(p) for p in table.rglob("*")) == before  # nothing changed

    code, out, _ = _run(capsys, db_url, "compact", "web.t", "ds=1")
    assert code == 0, out
    assert (
        out.splitlines()[0] == "web.t: compacted 1 of 1 partition(s) (merge), 0 skipped, 0 failed"
    )
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        one = catalog.partitions.get("web.t", {"ds": "1"})
        two = catalog.partitions.get("web.t", {"ds": "2"})
    assert one is not None
    assert two is not None
    assert one.file_count == 1
    assert "_hcat_compacted" in one.location
    assert two.location == f"file://{table}/ds=2"  # not asked for: untouched
    rows = pq.read_table(one.location.removeprefix("file://")).column("id").to_pylist()
    assert sorted(rows) == list(range(120))


def test_compact_bad_input(capsys, db_url: str, table: Path):
    code, _, err = _run(capsys, db_url, "compact", "web.nope")
    assert code == 2
    assert err.startswith("hcat-notify: error: table web.nope is not registered")
    assert err.count("\n") == 1
    code, _, err = _run(capsys, db_url, "compact", "web.t", "hour=1")
    assert code == 2
    assert "no partition key 'hour'" in err


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _age_markers(root: Path, age: timedelta) -> None:
    """Make every superseded marker under ``root`` look ``age`` old."""
    for marker in root.rglob("_hcat_superseded.json"):
        document = json.loads(marker.read_text())
        when = datetime.fromisoformat(document["superseded_at"]) - age
        document["superseded_at"] = when.isoformat(timespec="seconds")
        marker.write_text(json.dumps(document))


def test_purge(capsys, db_url: str, table: Path, tmp_path: Path):
    code, out, _ = _run(capsys, db_url, "compact", "web.t")
    assert code == 0, out
    assert "2 superseded location(s) kept for readers" in out
    old = {ds: table / f"ds={ds}" for ds in ("1", "2")}

    code, out, _ = _run(capsys, db_url, "compact", "web.t", "--purge")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == (
        "web.t: purged 0 superseded directories (0 files, 0 bytes freed), "
        "2 kept, 0 refused, 0 failed"
    )
    assert lines[1].startswith(f"kept: file://{old['1']}: superseded ")
    assert lines[1].endswith("ago; purged once older than 1h")
    assert all(path.exists() for path in old.values())

    _age_markers(table, timedelta(hours=2))
    files = _snapshot(table)
    code, out, _ = _run(capsys, db_url, "-o", "json", "compact", "web.t", "--purge", "--dry-run")
    assert code == 0, out
    planned = json.loads(out)
    assert (planned["dry_run"], planned["deleted"], planned["files_deleted"]) == (True, 2, 26)
    assert planned["older_than"] == 3600
    assert [d["status"] for d in planned["directories"]] == ["planned", "planned"]
    assert _snapshot(table) == files  # nothing changed

    code, out, _ = _run(capsys, db_url, "compact", "web.t", "ds=1", "--purge")
    assert code == 0, out
    assert out.splitlines()[1] == f"deleted: file://{old['1']}"
    assert not old["1"].exists()
    assert old["2"].exists()

    code, out, _ = _run(capsys, db_url, "compact", "web.t", "--purge", "--older-than", "3h")
    assert code == 0, out
    assert out.startswith("web.t: purged 0 superseded directories")
    assert old["2"].exists()

    code, out, _ = _run(capsys, db_url, "-o", "json", "compact", "web.t", "--purge")
    assert code == 0, out
    done = json.loads(out)
    assert (done["deleted"], done["refused"], done["failed"]) == (1, 0, 0)
    assert done["bytes_freed"] > 0
    assert not old["2"].exists()
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        for partition in catalog.list_partitions("web.t"):
            assert "_hcat_compacted" in partition.location
            rows = pq.read_table(partition.location.removeprefix("file://"))
            assert sorted(rows.column("id").to_pylist()) == list(range(120))


def test_purge_refusal_exits_2(capsys, db_url: str, table: Path):
    code, out, _ = _run(capsys, db_url, "compact", "web.t", "ds=1")
    assert code == 0, out
    pq.write_table(pa.table({"id": [999]}), table / "ds=1" / "part-late.parquet")
    _age_markers(table, timedelta(hours=2))
    code, out, _ = _run(capsys, db_url, "compact", "web.t", "--purge")
    assert code == 2
    assert out.splitlines()[0].endswith("0 kept, 1 refused, 0 failed")
    assert f"refused: file://{table}/ds=1: it holds 1 data file(s)" in out
    assert (table / "ds=1" / "part-late.parquet").exists()


def test_purge_bad_input(capsys, db_url: str, table: Path):
    files = _snapshot(table)
    for args, message in [
        (["--purge", "--older-than", "1x"], "invalid duration '1x'"),
        (["--purge", "--older-than", "0s"], "must be positive"),
        (["--purge", "--mode", "har"], "--mode cannot be combined with --purge"),
        (["--purge", "--spark", "local[2]"], "--spark cannot be combined with --purge"),
        (["--older-than", "2h"], "--older-than only applies with --purge"),
        (["hour=1", "--purge"], "no partition key 'hour'"),
    ]:
        code, _, err = _run(capsys, db_url, "compact", "web.t", *args)
        assert code == 2, args
        assert err.startswith("hcat-notify: error: "), err
        assert message in err
        assert err.count("\n") == 1
    code, _, err = _run(capsys, db_url, "compact", "web.nope", "--purge")
    assert code == 2
    assert err.startswith("hcat-notify: error: table web.nope is not registered")
    assert err.count("\n") == 1
    assert _snapshot(table) == files


def test_merge_on_a_csv_table_is_one_line(capsys, db_url: str, tmp_path: Path):
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table(
            "web.text", location=str(tmp_path / "text"), partition_keys=["d"], storage_format="csv"
        )
    code, _, err = _run(capsys, db_url, "compact", "web.text")
    assert code == 2
    assert err.startswith("hcat-notify: error: cannot merge csv table web.text")
    assert err.count("\n") == 1


@pytest.mark.spark
def test_spark_option_uses_a_running_session_and_leaves_it_running(
    spark, capsys, db_url: str, table: Path
):
    code, out, _ = _run(capsys, db_url, "-o", "json", "compact", "web.t", "--spark", "local[2]")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["compacted"] == 2
    assert summary["spark_application"] == spark.sparkContext.applicationId
    assert spark.range(3).count() == 3  # not stopped: the command did not start it


def _java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and Path(home, "bin", "java").exists()) or shutil.which("java") is not None


@pytest.mark.spark
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_spark_option_in_a_fresh_process(db_url: str, table: Path, tmp_path: Path):
    pytest.importorskip("pyspark")
    if not _java():
        pytest.skip("needs Java")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    command = [sys.executable, "-m", "hcat_notify.cli", "--db-url", db_url, "-o", "json"]
    finished = subprocess.run(
        [*command, "compact", "web.t", "--spark", "local[2]"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    summary = json.loads(finished.stdout)
    assert (summary["compacted"], summary["failed"]) == (2, 0)
    assert (summary["files_before"], summary["files_after"]) == (24, 2)
    assert summary["spark_application"].startswith("local-")
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        for partition in catalog.list_partitions("web.t"):
            assert "_hcat_compacted" in partition.location
            assert partition.file_count == 1
            rows = pq.read_table(partition.location.removeprefix("file://"))
            assert sorted(rows.column("id").to_pylist()) == list(range(120))


def test_spark_option_without_pyspark(capsys, monkeypatch, db_url: str, table: Path):
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # as if pyspark were not installed
    files = _snapshot(table)
    code, _, err = _run(capsys, db_url, "compact", "web.t", "--spark", "local[2]")
    assert code == 2
    assert err.startswith("hcat-notify: error: --spark needs pyspark, which is not installed")
    assert "pip install 'hcat-notify[spark]'" in err
    assert err.count("\n") == 1
    assert _snapshot(table) == files
