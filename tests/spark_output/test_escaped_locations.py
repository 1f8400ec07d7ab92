"""Partition values that need escaping, through every command that handles locations.

Locations are Hadoop path strings (``…/region=us%2Feast``), never URIs to decode: the
writer's appends, the committer's archives, ``hcat-notify compact`` (dry run, merge, HAR,
purge) and ``hcat-notify recover`` must all find the directory each value names. Rows
are read back through Spark from the registered locations (``har://`` ones through
Hadoop's ``HarFileSystem``).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hcat_notify.cli import main
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import Catalog
from spark_output import CompactionPolicy, write_partitions
from tests.spark_output.crashes import SimulatedCrash, crash_after_moves
from tests.spark_output.maintenance.tables import _age_markers
from tests.spark_output.test_spec_escaping_spark import TRICKY_VALUES

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]

ROWS_PER_VALUE = 6


def _create(catalog: Catalog, root: Path) -> None:
    catalog.create_table("web.esc", location=str(root), partition_keys=["region"])


def _frame(spark: Any, offset: int, tasks: int) -> Any:
    """ROWS_PER_VALUE rows per tricky value; every one of ``tasks`` Spark tasks writes a
    file into every partition (round robin over rows in partition order)."""
    rows = [
        (offset + index * ROWS_PER_VALUE + n, f"v{n}", value)
        for index, value in enumerate(TRICKY_VALUES)
        for n in range(ROWS_PER_VALUE)
    ]
    df = spark.createDataFrame(rows, "id long, value string, region string").coalesce(1)
    return df.repartition(tasks) if tasks > 1 else df


def _expected(*offsets: int) -> dict[str, set[int]]:
    """Path spec -> the ids written there by writes starting at ``offsets``."""
    return {
        PartitionSpec.from_mapping({"region": value}).to_path(): {
            offset + index * ROWS_PER_VALUE + n for offset in offsets for n in range(ROWS_PER_VALUE)
        }
        for index, value in enumerate(TRICKY_VALUES)
    }


def _registered_rows(spark: Any, catalog: Catalog) -> dict[str, set[int]]:
    """Path spec -> the ids Spark reads at the partition's registered location."""
    return {
        p.spec.to_path(): {row.id for row in spark.read.parquet(p.location).collect()}
        for p in catalog.list_partitions("web.esc")
    }


def _data_dirs(root: Path) -> set[str]:
    """Directories under ``root`` (relative) holding visible data files, hidden ones skipped."""
    found = set()
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        if any(not f.startswith(("_", ".")) for f in files):
            found.add(Path(directory).relative_to(root).as_posix())
    return found


def _cli(capsys: Any, db_url: str, *args: str) -> tuple[int, Any, str]:
    code = main(["--db-url", db_url, "-o", "json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_appends_after_a_compacted_write_land_where_each_value_lives(
    spark, settings, catalog, tmp_path
):
    root = tmp_path / "esc"
    _create(catalog, root)
    write_partitions(
        _frame(spark, 0, tasks=2),
        "web.esc",
        settings=settings,
        compaction=CompactionPolicy(min_files=2),
    )
    merged = {p.spec.to_path(): p.file_count for p in catalog.list_partitions("web.esc")}
    assert set(merged.values()) == {1}  # the two staged files of each partition merged

    write_partitions(_frame(spark, 1000, tasks=1), "web.esc", settings=settings)

    expected = _expected(0, 1000)
    assert _registered_rows(spark, catalog) == expected
    assert {p.file_count for p in catalog.list_partitions("web.esc")} == {2}
    # Every file is in the directory its value names, nowhere else.
    assert _data_dirs(root) == set(expected)


def test_a_write_archived_by_har_is_read_back_by_spark(spark, settings, catalog, tmp_path):
    _create(catalog, tmp_path / "esc")
    result = write_partitions(
        _frame(spark, 0, tasks=2),
        "web.esc",
        settings=settings,
        compaction=CompactionPolicy(min_files=2, mode="har"),
    )
    assert len(result.partitions_created) == len(TRICKY_VALUES)
    partitions = catalog.list_partitions("web.esc")
    assert all(p.archived and p.location.startswith("har://") for p in partitions)
    assert _registered_rows(spark, catalog) == _expected(0)


@pytest.mark.parametrize("mode", ["merge", "har"])
def test_compact_dry_run_compact_and_purge_every_escaped_value(
    spark, capsys, db_url, settings, catalog, tmp_path, mode
):
    root = tmp_path / "esc"
    _create(catalog, root)
    for offset in (0, 1000):
        write_partitions(_frame(spark, offset, tasks=1), "web.esc", settings=settings)
    before = {p.spec.to_path(): p.location for p in catalog.list_partitions("web.esc")}
    count = len(TRICKY_VALUES)

    code, one, err = _cli(
        capsys, db_url, "compact", "web.esc", "region=us/east", "--min-files", "2", "--dry-run"
    )
    assert (code, err) == (0, "")
    assert (one["considered"], one["compacted"], one["failed"]) == (0, 0, 0)  # no such value
    code, one, err = _cli(
        capsys, db_url, "compact", "web.esc", "region=a/b", "--min-files", "2", "--dry-run"
    )
    assert (code, err) == (0, "")
    assert (one["considered"], one["compacted"], one["failed"]) == (1, 1, 0)

    code, planned, err = _cli(
        capsys, db_url, "compact", "web.esc", "--mode", mode, "--min-files", "2", "--dry-run"
    )
    assert (code, err) == (0, "")
    assert (planned["considered"], planned["compacted"], planned["failed"]) == (count, count, 0)
    assert planned["files_before"] == 2 * count
    assert {p.spec.to_path(): p.location for p in catalog.list_partitions("web.esc")} == before

    code, done, err = _cli(capsys, db_url, "compact", "web.esc", "--mode", mode, "--min-files", "2")
    assert (code, err) == (0, "")
    assert (done["compacted"], done["failed"], done["errors"]) == (count, 0, [])
    assert sorted(done["old_locations"]) == sorted(before.values())
    after = catalog.list_partitions("web.esc")
    assert all(p.location != before[p.spec.to_path()] for p in after)
    assert all(p.location.startswith("har://") == (mode == "har") for p in after)
    assert _registered_rows(spark, catalog) == _expected(0, 1000)

    _age_markers(root, timedelta(hours=2))  # older than the default --older-than (1h)
    code, purged, err = _cli(capsys, db_url, "compact", "web.esc", "--purge")
    assert (code, err) == (0, "")
    assert (purged["deleted"], purged["refused"], purged["failed"]) == (count, 0, 0)
    assert sorted(d["location"] for d in purged["directories"]) == sorted(before.values())
    assert _data_dirs(root) == set()  # the originals are gone; the copies are hidden
    assert _registered_rows(spark, catalog) == _expected(0, 1000)


def test_recover_rolls_forward_a_crashed_write_of_escaped_values(
    spark, capsys, db_url, settings, catalog, tmp_path
):
    # A table directory name with a space and a percent sign: a Hadoop path, not a URI.
    root = tmp_path / "esc table 100%"
    _create(catalog, root)

    with crash_after_moves(), pytest.raises(SimulatedCrash):
        write_partitions(
            _frame(spark, 0, tasks=1),
            "web.esc",
            settings=settings,
            job_id="job-crashed",
        )
    assert catalog.list_partitions("web.esc") == []

    code, outcomes, err = _cli(capsys, db_url, "recover", "web.esc", "--force")
    assert (code, err) == (0, "")
    assert outcomes == [{"job_id": "job-crashed", "table": "web.esc", "action": "rolled forward"}]
    assert _registered_rows(spark, catalog) == _expected(0)
    assert _data_dirs(root) == set(_expected(0))
    assert not (root / "_hcat_staging").exists()
