"""compact_table: copy, verify, compare-and-set switch of registered partitions."""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hcat_notify.errors import ConflictError
from hcat_notify.store import Catalog, NewPartition
from spark_output import CompactionError, CompactionPolicy, write_partitions
from spark_output.fs import TableLocation
from spark_output.maintenance import table_compaction
from spark_output.maintenance.marker import SUPERSEDED_MARKER
from spark_output.maintenance.table_compaction import COMPACTED_DIR, PartitionPlan, compact_table
from tests.spark_output.compaction.damage import damaged_merges
from tests.spark_output.frames import clicks_frame
from tests.spark_output.maintenance.tables import (
    _csv_table,
    _data_files,
    _local,
    _pyarrow_table,
    _read_registered,
    _rows_at,
    _snapshot,
)

# --------------------------------------------------------------------------- no Spark


def test_local_merge_switches_location_and_keeps_old_files(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root = _pyarrow_table(catalog, tmp_path, "web.local", {"a": 12, "b": 3})
        before = {p.spec.to_path(): p for p in catalog.list_partitions("web.local")}
        rows_before = _rows_at(before["datestamp=20110228/region=a"].location)
        seen: list[tuple[int, int, str]] = []
        summary = compact_table(
            catalog,
            "web.local",
            policy=CompactionPolicy(min_files=10),
            progress=lambda done, total, spec: seen.append((done, total, spec)),
        )
        assert summary.ok
        assert not summary.dry_run
        assert (summary.partitions_considered, summary.partitions_compacted) == (2, 1)
        assert summary.partitions_skipped == 1
        assert (summary.files_before, summary.files_after) == (12, 1)
        assert seen == [(1, 1, "datestamp=20110228/region=a")]
        after = {p.spec.to_path(): p for p in catalog.list_partitions("web.local")}
        a = after["datestamp=20110228/region=a"]
        assert a.location != before["datestamp=20110228/region=a"].location
        assert f"/{COMPACTED_DIR}/datestamp=20110228/region=a/" in a.location
        assert (a.file_count, a.version) == (1, before["datestamp=20110228/region=a"].version + 1)
        assert a.total_bytes == sum(p.stat().st_size for p in _data_files(_local(a.location)))
        assert _rows_at(a.location) == rows_before
        # untouched partition, old files kept and marked for a later clean-up
        assert after["datestamp=20110228/region=b"] == before["datestamp=20110228/region=b"]
        old = root / "datestamp=20110228" / "region=a"
        assert len(_data_files(old)) == 12
        assert summary.old_locations == (before["datestamp=20110228/region=a"].location,)
        marker = json.loads((old / SUPERSEDED_MARKER).read_text())
        assert marker["superseded_by"] == a.location
        assert (_local(a.location) / "_hcat_compaction.json").exists()
        # compacting again: nothing triggers any more
        again = compact_table(catalog, "web.local", policy=CompactionPolicy(min_files=10))
        assert again.partitions_compacted == 0
        assert again.partitions_skipped == 2


def test_dry_run_changes_nothing(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root = _pyarrow_table(catalog, tmp_path, "web.dry", {"a": 12, "b": 11, "c": 2})
        registry = catalog.list_partitions("web.dry")
        files = _snapshot(root)
        summary = compact_table(
            catalog, "web.dry", policy=CompactionPolicy(min_files=10), dry_run=True
        )
        assert summary.dry_run
        assert summary.partitions_compacted == 2
        assert summary.partitions_skipped == 1
        assert [r.status for r in summary.results] == ["planned", "planned", "skipped"]
        assert (summary.files_before, summary.files_after) == (23, 2)
        assert summary.bytes_before == sum(
            p.total_bytes for p in registry if not p.spec.to_path().endswith("c")
        )
        assert summary.old_locations == ()
        assert catalog.list_partitions("web.dry") == registry
        assert _snapshot(root) == files


def test_an_unusable_location_fails_that_partition_only(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root = _pyarrow_table(catalog, tmp_path, "web.odd", {"a": 12})
        odd = str(root / "not-a-directory")  # a file where a directory should be
        Path(odd).write_text("x")
        catalog.add_partitions(
            "web.odd", [NewPartition({"datestamp": "20110228", "region": "b"}, odd, 12, 0)]
        )
        summary = compact_table(catalog, "web.odd", policy=CompactionPolicy(min_files=10))
        assert (summary.partitions_compacted, summary.partitions_failed) == (1, 1)
        assert len(summary.errors) == 1
        assert "region=b" in summary.errors[0]
        assert odd in summary.errors[0]
        odd_partition = catalog.partitions.get("web.odd", {"datestamp": "20110228", "region": "b"})
        assert odd_partition is not None
        assert odd_partition.location == odd


def test_partial_spec_and_merge_refused_for_csv(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        _pyarrow_table(catalog, tmp_path, "web.part", {"a": 12, "b": 12})
        summary = compact_table(
            catalog, "web.part", {"region": "b"}, policy=CompactionPolicy(min_files=10)
        )
        assert [r.spec for r in summary.results] == ["datestamp=20110228/region=b"]
        assert summary.partitions_compacted == 1
        catalog.create_table(
            "web.text", location=str(tmp_path / "text"), partition_keys=["d"], storage_format="csv"
        )
        with pytest.raises(CompactionError, match="use mode 'har'"):
            compact_table(catalog, "web.text", policy=CompactionPolicy())


def test_concurrent_compaction_is_refused_and_the_copy_removed(settings, tmp_path, monkeypatch):
    with Catalog.open(settings) as catalog:
        root = _pyarrow_table(catalog, tmp_path, "web.race", {"a": 12})
        (before,) = catalog.list_partitions("web.race")
        seen: list[PartitionPlan] = []

        def bump(plan: PartitionPlan) -> None:
            # another compaction (or a write) switches the partition first
            seen.append(plan)
            assert (
                TableLocation.parse(plan.target_uri)
                .fs.get_file_info(TableLocation.parse(plan.target_uri).path)
                .type
                == pafs.FileType.Directory
            )
            catalog.partitions.update(
                "web.race", before.spec, expected_version=plan.version, file_count=12
            )

        switch_location = table_compaction.switch_location

        def bump_then_switch(catalog, plan, **changes):
            bump(plan)
            switch_location(catalog, plan, **changes)

        monkeypatch.setattr(table_compaction, "switch_location", bump_then_switch)
        summary = compact_table(catalog, "web.race", policy=CompactionPolicy(min_files=10))
        assert not summary.ok
        (result,) = summary.results
        assert result.status == "conflict"
        (error,) = summary.errors
        assert "datestamp=20110228/region=a" in error
        assert "refused" in error
        assert "changed concurrently" in error
        target = _local(seen[0].target_uri)
        assert not target.exists()  # the copy is gone
        (after,) = catalog.list_partitions("web.race")
        assert after.location == before.location
        assert after.version == before.version + 1
        assert len(_data_files(root / "datestamp=20110228" / "region=a")) == 12
        assert summary.old_locations == ()
        with pytest.raises(ConflictError):  # the catalog's own guard, for reference
            catalog.partitions.update("web.race", before.spec, expected_version=before.version)


def test_integrity_failure_names_the_partition_and_keeps_its_row(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        _pyarrow_table(catalog, tmp_path, "web.bad", {"a": 12, "b": 12})
        before = {p.spec.to_path(): p for p in catalog.list_partitions("web.bad")}

        def corrupt(fs: pafs.FileSystem, path: str) -> None:
            if "region=b" not in path:
                return
            table = pq.read_table(path)
            pq.write_table(table.slice(1), path)  # a row goes missing

        with damaged_merges(corrupt):
            summary = compact_table(catalog, "web.bad", policy=CompactionPolicy(min_files=10))
        assert (summary.partitions_compacted, summary.partitions_failed) == (1, 1)
        (error,) = summary.errors
        assert "datestamp=20110228/region=b" in error
        assert "verification" in error
        after = {p.spec.to_path(): p for p in catalog.list_partitions("web.bad")}
        assert after["datestamp=20110228/region=b"] == before["datestamp=20110228/region=b"]
        assert after["datestamp=20110228/region=a"].file_count == 1
        compacted = tmp_path / "web_bad" / COMPACTED_DIR / "datestamp=20110228"
        assert not (compacted / "region=b").exists() or not any((compacted / "region=b").iterdir())


# --------------------------------------------------------------------------- purge


# --------------------------------------------------------------------------- Spark


@pytest.mark.spark
@pytest.mark.integration
def test_merge_existing_table_while_a_reader_loops(spark, settings, tmp_path):
    from spark_output import create_table

    df = clicks_frame(spark, partitions=3, rows=3 * 12 * 4, tasks=12)
    create_table(
        "maint.clicks",
        df.schema,
        location=str(tmp_path / "clicks"),
        partition_keys=["datestamp", "region"],
        settings=settings,
        spark=spark,
    )
    write_partitions(df, "maint.clicks", settings=settings)
    expected = collections.Counter((r.id, r.value) for r in df.collect())
    with Catalog.open(settings) as catalog:
        before = {p.spec.to_path(): p for p in catalog.list_partitions("maint.clicks")}
        assert {p.file_count for p in before.values()} == {12}

        stop = threading.Event()
        problems: list[str] = []
        reads = [0]

        def reader() -> None:
            with Catalog.open(settings) as own:
                while not stop.is_set():
                    try:
                        rows = _read_registered(spark, own, "maint.clicks")
                    except Exception as exc:  # noqa: BLE001 - the test reports it
                        problems.append(repr(exc))
                        return
                    got = collections.Counter((r.id, r.value) for r in rows)
                    if len(rows) != sum(expected.values()) or got != expected:
                        problems.append(f"read {len(rows)} rows, not the expected multiset")
                    reads[0] += 1

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        try:
            summary = compact_table(
                catalog, "maint.clicks", policy=CompactionPolicy(min_files=10), spark=spark
            )
            # let the reader go round at least once after the switch
            target = reads[0] + 1
            while reads[0] <= target and thread.is_alive() and not problems:
                stop.wait(0.05)
        finally:
            stop.set()
            thread.join(60)
        assert not problems, problems
        assert reads[0] >= 2
        assert summary.ok, summary.errors
        assert (summary.partitions_compacted, summary.files_before, summary.files_after) == (
            3,
            36,
            3,
        )
        assert summary.spark_catalog_errors == ()
        after = {p.spec.to_path(): p for p in catalog.list_partitions("maint.clicks")}
        for spec, partition in after.items():
            assert partition.location != before[spec].location
            assert f"/{COMPACTED_DIR}/{spec}/" in partition.location
            assert partition.file_count == 1
            assert len(_data_files(_local(before[spec].location))) == 12  # old files kept
        rows = _read_registered(spark, catalog, "maint.clicks")
        assert collections.Counter((r.id, r.value) for r in rows) == expected
        # the Spark catalog follows, and a path-based scan of the table root does not see
        # the hidden copies (old files only, each row once)
        via_table = spark.table("maint.clicks").select("id", "value").collect()
        assert collections.Counter((r.id, r.value) for r in via_table) == expected
        locations = {
            row.partition: row for row in spark.sql("SHOW PARTITIONS maint.clicks").collect()
        }
        assert len(locations) == 3
        described = spark.sql(
            "DESCRIBE FORMATTED maint.clicks PARTITION (datestamp='20110228', region='r00')"
        ).collect()
        assert any(COMPACTED_DIR in str(row.data_type) for row in described)
        by_path = spark.read.parquet(str(tmp_path / "clicks")).select("id", "value").collect()
        assert collections.Counter((r.id, r.value) for r in by_path) == expected


@pytest.mark.spark
@pytest.mark.integration
def test_har_on_a_csv_table_reads_identical_rows(spark, settings, tmp_path):
    with Catalog.open(settings) as catalog:
        expected = _csv_table(spark, catalog, settings, tmp_path, "maint.logs")
        assert (
            collections.Counter(
                (r.id, r.value) for r in _read_registered(spark, catalog, "maint.logs", "csv")
            )
            == expected
        )
        summary = compact_table(
            catalog, "maint.logs", policy=CompactionPolicy(min_files=4, mode="har"), spark=spark
        )
        assert summary.ok, summary.errors
        assert summary.partitions_compacted == 2
        for partition in catalog.list_partitions("maint.logs"):
            assert partition.archived
            assert partition.location.startswith("har://file-localhost/")
            assert f"/{COMPACTED_DIR}/" in partition.location
            assert partition.location.endswith("/_hcat_archive.har")
            assert partition.file_count == 6
        rows = _read_registered(spark, catalog, "maint.logs", "csv")
        assert collections.Counter((r.id, r.value) for r in rows) == expected
        again = compact_table(
            catalog, "maint.logs", policy=CompactionPolicy(min_files=4, mode="har"), spark=spark
        )
        assert again.partitions_compacted == 0
        assert {r.reason.split(" ")[0] for r in again.results} == {"archived"}
