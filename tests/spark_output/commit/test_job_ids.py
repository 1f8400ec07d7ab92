"""A job id names the job's staging and trash directories: one validation refuses any
id that is not one plain path component before anything is written, and a job's
directories are deleted only where they belong, never through a link."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs as pafs

from hcat_notify.config import load_settings
from hcat_notify.errors import ConcurrentWriteError, InvalidInputError
from hcat_notify.store import Catalog
from spark_output.commit.committer import PartitionCommitter, staging_entry_id
from spark_output.commit.moves import STAGING_DIR, remove_job_dirs
from spark_output.writer import write_partitions


def _table(tmp_path: Path, db_url: str, warehouse: Path) -> tuple[Catalog, Path]:
    root = warehouse / "t"
    root.mkdir()
    catalog = Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url))
    catalog.create_table("db.t", location=str(root), partition_keys=["p"])
    return catalog, root


BAD_IDS = ("{victim}", "../../../../{relative}", "..", ".", "", "a/b", "-x", "x" * 121)


def test_a_bad_job_id_is_refused_before_anything_is_written(
    db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    catalog, root = _table(tmp_path, db_url, narrow_warehouse)
    (root / STAGING_DIR).mkdir()  # so that ../ climbs out of it
    with catalog:
        for job_id in BAD_IDS:
            bad = job_id.format(victim=victim, relative=victim.relative_to(tmp_path))

            def stage_and_fail(bad: str = bad) -> None:
                committer = PartitionCommitter(
                    catalog, catalog.get_table("db.t"), job_id=bad, mode="append"
                )
                committer.cleanup()  # what write_partitions does when Spark's save fails

            expected = f"^invalid job id {re.escape(repr(bad))}: .*; nothing was written$"
            with pytest.raises(InvalidInputError, match=expected):
                stage_and_fail()
            with pytest.raises(InvalidInputError, match=expected):
                catalog.commits.begin(
                    bad, "db.t", mode="append", partitions=[], plan={}, started_at=catalog.now()
                )
        assert catalog.commits.pending() == []
    assert (victim / "data" / "precious.txt").read_text() == "keep me\n"


def test_good_job_ids_and_their_staging_entries_are_accepted(
    db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    catalog, root = _table(tmp_path, db_url, narrow_warehouse)
    with catalog:
        for job in ("20261128T101500-0a1b2c3d4e5f", "import-ab12:3+x_y.z", "j" * 120):
            committer = PartitionCommitter(
                catalog, catalog.get_table("db.t"), job_id=job, mode="append"
            )
            committer.journal_staging(started_at=catalog.now())
            assert catalog.commits.get(staging_entry_id(job)) is not None
            assert committer.staging == str(root / STAGING_DIR / job)


def test_job_dirs_are_deleted_only_where_they_belong_never_through_a_link(
    tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    table = narrow_warehouse / "t"
    table.mkdir()
    (victim / "job-1").mkdir()
    (victim / "job-1" / "part-0").write_text("x")
    (table / STAGING_DIR).symlink_to(victim)  # the table's staging dir swapped for a link
    kept = remove_job_dirs(
        pafs.LocalFileSystem(),
        str(table),
        str(table / STAGING_DIR / "job-1"),
        str(victim / "data"),
        str(table / "_hcat_trash" / ".." / ".." / "t2"),
    )
    assert (victim / "job-1" / "part-0").exists()
    assert (victim / "data" / "precious.txt").read_text() == "keep me\n"
    assert [line.partition(": ")[0] for line in kept] == [
        str(table / STAGING_DIR / "job-1"),
        str(victim / "data"),
        str(table / "_hcat_trash" / ".." / ".." / "t2"),
    ]
    assert "symbolic link" in kept[0]
    assert "is not in" in kept[1]


def test_write_partitions_refuses_a_bad_job_id_before_it_opens_anything(tmp_path: Path):
    frame: Any = None  # never looked at: the id is refused first
    with pytest.raises(InvalidInputError, match=r"^invalid job id '\.\./\.\./x': "):
        write_partitions(frame, "db.t", job_id="../../x", settings=load_settings(home=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_job_id_ending_with_staging_is_refused(
    db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # review-trust2 finding 9: job "x.staging"'s entry would be job "x"'s staging entry
    catalog, _ = _table(tmp_path, db_url, narrow_warehouse)
    with catalog:
        table = catalog.get_table("db.t")
        with pytest.raises(InvalidInputError, match=r"may not end with '\.staging'"):
            PartitionCommitter(catalog, table, job_id="x.staging", mode="append")
        with pytest.raises(InvalidInputError, match=r"may not end with '\.staging'"):
            catalog.commits.begin(
                "x.staging.staging", "db.t", mode="append", partitions=[], plan={},
                started_at=catalog.now(),
            )  # fmt: skip
        assert catalog.commits.pending() == []


def test_a_second_writer_with_the_same_job_id_is_refused_before_spark_writes(
    db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # review-trust2 finding 9: Spark's errorifexists failed on the first writer's staging,
    # and the second writer's cleanup deleted it
    catalog, root = _table(tmp_path, db_url, narrow_warehouse)
    first = root / STAGING_DIR / "job-1" / "p=1"
    first.mkdir(parents=True)
    (first / "part-0.parquet").write_text("first writer's")
    with catalog:
        table = catalog.get_table("db.t")
        second = PartitionCommitter(catalog, table, job_id="job-1", mode="append")
        with pytest.raises(ConcurrentWriteError, match=r"job job-1 is writing to db\.t already"):
            second.check_staging_free()
        PartitionCommitter(catalog, table, job_id="job-2", mode="append").check_staging_free()
    assert (first / "part-0.parquet").read_text() == "first writer's"


def test_only_an_aborted_staging_entry_is_begun_again(
    db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # a write journals its staging before Spark writes; a retry with the same job id after
    # a failed Spark job (entry aborted) begins it again, a live one's is never taken
    catalog, _ = _table(tmp_path, db_url, narrow_warehouse)
    with catalog:
        committer = PartitionCommitter(
            catalog, catalog.get_table("db.t"), job_id="j", mode="append"
        )
        committer.journal_staging(started_at=catalog.now())
        with pytest.raises(
            InvalidInputError, match=r"^job id j\.staging was already used \(pending\)$"
        ):
            committer.journal_staging(started_at=catalog.now())
        committer.end_staging("the Spark job failed; staging removed")
        committer.journal_staging(started_at=catalog.now())  # the retry
        assert [entry.job_id for entry in catalog.commits.pending()] == ["j.staging"]
        catalog.commits.begin(
            "j", "db.t", mode="append", partitions=[], plan={}, started_at=catalog.now()
        )
        catalog.commits.abort("j")
        with pytest.raises(InvalidInputError, match=r"^job id j was already used \(aborted\)$"):
            catalog.commits.begin(
                "j", "db.t", mode="append", partitions=[], plan={}, started_at=catalog.now()
            )
