"""Compaction as maintenance of existing partitions: copy, verify, compare-and-set switch."""

from __future__ import annotations

import collections
import json
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hcat_notify.config import load_settings
from hcat_notify.errors import ConflictError, TableNotFoundError, UnknownPartitionKeyError
from hcat_notify.store import Catalog, NewPartition
from spark_output import CompactionError, CompactionPolicy, write_partitions
from spark_output.fs import TableLocation
from spark_output.maintenance import (
    COMPACTED_DIR,
    DEFAULT_PURGE_AGE,
    SUPERSEDED_MARKER,
    PartitionPlan,
    compact_table,
    purge_superseded,
)
from tests.spark_output.frames import clicks_frame


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path / 'catalog.db'}")


def _data_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", "."))
    )


def _local(location: str) -> Path:
    return Path(TableLocation.parse(location).path)


def _snapshot(root: Path) -> dict[str, int]:
    """Every file under ``root`` with its size (hidden ones too)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _pyarrow_table(
    catalog: Catalog, tmp_path: Path, name: str, files: dict[str, int], rows_per_file: int = 50
) -> Path:
    """A Parquet table written without Spark: ``files`` maps region -> number of files."""
    root = tmp_path / name.replace(".", "_")
    catalog.create_table(name, location=str(root), partition_keys=["datestamp", "region"])
    new = []
    next_id = 0
    for region, count in files.items():
        directory = root / "datestamp=20110228" / f"region={region}"
        directory.mkdir(parents=True)
        for number in range(count):
            ids = list(range(next_id, next_id + rows_per_file))
            next_id += rows_per_file
            table = pa.table({"id": ids, "value": [f"v{i}" for i in ids]})
            pq.write_table(table, directory / f"part-{number:05d}.snappy.parquet")
        new.append(
            NewPartition(
                spec={"datestamp": "20110228", "region": region},
                location=f"file://{directory}",
                file_count=count,
                total_bytes=sum(p.stat().st_size for p in _data_files(directory)),
            )
        )
    catalog.add_partitions(name, new, announce=False)
    return root


def _rows_at(location: str) -> collections.Counter[tuple[Any, ...]]:
    path = _local(location)
    table = pq.read_table([str(p) for p in _data_files(path)])
    return collections.Counter(
        zip(table["id"].to_pylist(), table["value"].to_pylist(), strict=True)
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


def test_concurrent_compaction_is_refused_and_the_copy_removed(settings, tmp_path):
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
            catalog.update_partition(
                "web.race", before.spec, expected_version=plan.version, file_count=12
            )

        summary = compact_table(
            catalog, "web.race", policy=CompactionPolicy(min_files=10), _before_switch=bump
        )
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
            catalog.update_partition("web.race", before.spec, expected_version=before.version)


def test_integrity_failure_names_the_partition_and_keeps_its_row(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        _pyarrow_table(catalog, tmp_path, "web.bad", {"a": 12, "b": 12})
        before = {p.spec.to_path(): p for p in catalog.list_partitions("web.bad")}

        def corrupt(fs: pafs.FileSystem, path: str) -> None:
            if "region=b" not in path:
                return
            table = pq.read_table(path)
            pq.write_table(table.slice(1), path)  # a row goes missing

        summary = compact_table(
            catalog, "web.bad", policy=CompactionPolicy(min_files=10), _corrupt_hook=corrupt
        )
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

A = "datestamp=20110228/region=a"
B = "datestamp=20110228/region=b"


def _compacted(catalog: Catalog, tmp_path: Path, name: str, files: dict[str, int]):
    """A pyarrow table whose partitions were all compacted: (root, registry before)."""
    root = _pyarrow_table(catalog, tmp_path, name, files)
    before = {p.spec.to_path(): p for p in catalog.list_partitions(name)}
    summary = compact_table(catalog, name, policy=CompactionPolicy(min_files=10))
    assert summary.ok
    assert summary.partitions_compacted == len(files)
    return root, before


def _age_markers(directory: Path, age: timedelta) -> None:
    """Make every superseded marker under ``directory`` look ``age`` old."""
    for marker in directory.rglob(SUPERSEDED_MARKER):
        document = json.loads(marker.read_text())
        when = datetime.fromisoformat(document["superseded_at"]) - age
        document["superseded_at"] = when.isoformat(timespec="seconds")
        marker.write_text(json.dumps(document))


def test_purge_deletes_superseded_dirs_and_registered_rows_stay(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, before = _compacted(catalog, tmp_path, "web.purge", {"a": 12, "b": 11})
        registered = {p.spec.to_path(): p for p in catalog.list_partitions("web.purge")}
        rows = {spec: _rows_at(p.location) for spec, p in registered.items()}
        assert rows[A] == _rows_at(before[A].location)
        old_a, old_b = _local(before[A].location), _local(before[B].location)
        size_a = sum(_snapshot(old_a).values())
        seen: list[tuple[int, int, str]] = []

        only_a = purge_superseded(
            catalog,
            "web.purge",
            {"region": "a"},
            older_than=timedelta(0),
            progress=lambda done, total, item: seen.append((done, total, item)),
        )
        assert only_a.ok
        assert (only_a.directories_deleted, only_a.directories_kept) == (1, 0)
        (result,) = only_a.results
        assert (result.status, result.spec) == ("deleted", A)
        assert result.location == before[A].location
        assert result.superseded_by == registered[A].location
        assert (result.files, result.bytes) == (13, size_a)  # 12 data files and the marker
        assert only_a.bytes_freed == size_a  # all merged away: no hard link left in the copy
        assert seen == [(1, 1, before[A].location)]
        assert not old_a.exists()
        assert len(_data_files(old_b)) == 11  # not asked for

        rest = purge_superseded(catalog, "web.purge", older_than=timedelta(0))
        assert rest.ok
        assert [(r.spec, r.status) for r in rest.results] == [(B, "deleted")]
        assert not old_b.exists()
        # the registry did not move, and reads the same rows as before the purge
        assert catalog.list_partitions("web.purge") == list(registered.values())
        for spec, partition in registered.items():
            assert _rows_at(partition.location) == rows[spec]
        assert {p.name for p in (root / "datestamp=20110228").iterdir()} == set()
        nothing = purge_superseded(catalog, "web.purge", older_than=timedelta(0))
        assert (nothing.directories_deleted, nothing.results) == (0, ())


def test_purge_follows_a_copy_that_was_compacted_again(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, before = _compacted(catalog, tmp_path, "web.chain", {"a": 12})
        (first,) = catalog.list_partitions("web.chain")
        first_dir = _local(first.location)
        # an append adds small files where the partition lives now; compact once more
        for number in range(11):
            ids = list(range(10_000 + number * 10, 10_000 + number * 10 + 10))
            table = pa.table({"id": ids, "value": [f"v{i}" for i in ids]})
            pq.write_table(table, first_dir / f"part-append-{number:05d}.parquet")
        catalog.update_partition(
            "web.chain", first.spec, expected_version=first.version, file_count=12
        )
        expected = _rows_at(first.location)
        again = compact_table(catalog, "web.chain", policy=CompactionPolicy(min_files=10))
        assert again.partitions_compacted == 1
        (second,) = catalog.list_partitions("web.chain")
        assert (first_dir / SUPERSEDED_MARKER).exists()

        summary = purge_superseded(catalog, "web.chain", older_than=timedelta(0))
        assert summary.ok
        assert {r.location: r.status for r in summary.results} == {
            before[A].location: "deleted",
            first.location: "deleted",
        }
        assert summary.bytes_freed > 0
        assert not _local(before[A].location).exists()
        assert not first_dir.exists()
        assert _rows_at(second.location) == expected
        assert len(expected) == 12 * 50 + 11 * 10
        assert f"/{COMPACTED_DIR}/" in second.location
        assert (root / COMPACTED_DIR).exists()


def test_purge_keeps_recent_and_registered_dirs(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, before = _compacted(catalog, tmp_path, "web.keep", {"a": 12, "b": 12})
        files = _snapshot(root)
        recent = purge_superseded(catalog, "web.keep")  # default age: one hour
        assert recent.older_than == DEFAULT_PURGE_AGE == timedelta(hours=1)
        assert recent.ok
        assert recent.directories_deleted == 0
        assert {r.status for r in recent.results} == {"kept"}
        assert all("purged once older than 1h" in r.reason for r in recent.results)
        assert _snapshot(root) == files

        # region=a is pointed back at its old directory, although the marker is there
        current = catalog.get_partition("web.keep", {"datestamp": "20110228", "region": "a"})
        assert current is not None
        catalog.update_partition(
            "web.keep",
            current.spec,
            expected_version=current.version,
            location=before[A].location,
        )
        _age_markers(root, timedelta(hours=2))
        summary = purge_superseded(catalog, "web.keep", older_than=timedelta(hours=1))
        assert summary.ok
        by_location = {r.location: r for r in summary.results}
        kept = by_location[before[A].location]
        assert kept.status == "kept"
        assert "registered again" in kept.reason
        # the copy it moved away from: unregistered but never superseded, so left alone
        orphan = by_location[current.location]
        assert (orphan.status, orphan.reason) == (
            "kept",
            "not registered, and no superseded marker",
        )
        assert by_location[before[B].location].status == "deleted"
        assert len(_data_files(_local(before[A].location))) == 12
        assert _local(current.location).exists()
        assert not _local(before[B].location).exists()


def test_purge_dry_run_deletes_nothing(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, before = _compacted(catalog, tmp_path, "web.drypurge", {"a": 12, "b": 12})
        files = _snapshot(root)
        seen: list[str] = []
        summary = purge_superseded(
            catalog,
            "web.drypurge",
            older_than=timedelta(0),
            dry_run=True,
            progress=lambda done, total, item: seen.append(item),
        )
        assert summary.dry_run
        assert summary.ok
        assert [r.status for r in summary.results] == ["planned", "planned"]
        assert summary.directories_deleted == 2
        assert summary.files_deleted == 26
        assert summary.bytes_freed == sum(
            size for path, size in files.items() if not path.startswith(COMPACTED_DIR)
        )
        assert seen == [before[A].location, before[B].location]
        assert _snapshot(root) == files


def test_purge_refuses_when_data_is_not_safe_elsewhere(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, before = _compacted(catalog, tmp_path, "web.unsafe", {"a": 12, "b": 12})
        # a: the partition moved on to a directory that is not the marker's, and the
        # marker's new location is gone
        current = catalog.get_partition("web.unsafe", {"datestamp": "20110228", "region": "a"})
        assert current is not None
        elsewhere = tmp_path / "elsewhere"
        _local(current.location).rename(elsewhere)
        catalog.update_partition(
            "web.unsafe",
            current.spec,
            expected_version=current.version,
            location=f"file://{elsewhere}",
        )
        # b: a late append landed in the old directory after the switch
        late = _local(before[B].location) / "part-late.parquet"
        pq.write_table(pa.table({"id": [1], "value": ["late"]}), late)
        files = _snapshot(root)

        summary = purge_superseded(catalog, "web.unsafe", older_than=timedelta(0))
        assert not summary.ok
        assert (summary.directories_refused, summary.directories_deleted) == (2, 0)
        by_spec = {r.spec: r for r in summary.results}
        assert by_spec[A].status == "refused"
        assert by_spec[A].reason == f"its new location {current.location} does not exist"
        assert by_spec[B].status == "refused"
        assert "part-late.parquet" in by_spec[B].reason
        assert len(summary.errors) == 2
        assert all(before[s].location in e for s, e in zip((A, B), summary.errors, strict=True))
        assert _snapshot(root) == files


def test_purge_never_deletes_a_directory_swapped_in_meanwhile(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        _, before = _compacted(catalog, tmp_path, "web.swap", {"a": 12})
        old = _local(before[A].location)

        def overwrite(location: str) -> None:
            # an overwrite of the partition moves the old directory to its trash and its
            # new files in at the same path (and registers them a moment later)
            assert location == before[A].location
            old.rename(tmp_path / "trash")
            old.mkdir()
            pq.write_table(pa.table({"id": [7], "value": ["new"]}), old / "part-new.parquet")

        summary = purge_superseded(
            catalog, "web.swap", older_than=timedelta(0), _before_delete=overwrite
        )
        assert not summary.ok
        (result,) = summary.results
        assert result.status == "refused"
        assert result.reason == "its marker changed or went away while purging"
        assert [p.name for p in old.iterdir()] == ["part-new.parquet"]


def test_purge_bad_input_changes_nothing(settings, tmp_path):
    with Catalog.open(settings) as catalog:
        root, _ = _compacted(catalog, tmp_path, "web.badpurge", {"a": 12})
        files = _snapshot(root)
        with pytest.raises(TableNotFoundError):
            purge_superseded(catalog, "web.nope", older_than=timedelta(0))
        with pytest.raises(UnknownPartitionKeyError, match="hour"):
            purge_superseded(catalog, "web.badpurge", {"hour": "1"}, older_than=timedelta(0))
        with pytest.raises(CompactionError, match="must not be negative"):
            purge_superseded(catalog, "web.badpurge", older_than=timedelta(seconds=-1))
        assert _snapshot(root) == files


# --------------------------------------------------------------------------- Spark


def _read_registered(spark, catalog: Catalog, table: str, fmt: str = "parquet"):
    locations = [p.location for p in catalog.list_partitions(table)]
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.schema("id long, value string")
    return reader.load(locations).select("id", "value").collect()


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


def _csv_table(spark, catalog: Catalog, settings, tmp_path: Path, name: str):
    """A CSV table written by Spark: 2 partitions of 6 files; returns its rows."""
    catalog.create_table(
        name,
        location=str(tmp_path / name.split(".")[1]),
        partition_keys=["datestamp", "region"],
        storage_format="csv",
    )
    df = clicks_frame(spark, partitions=2, rows=2 * 6 * 5, tasks=6)
    write_partitions(df, name, settings=settings)
    return collections.Counter((r.id, r.value) for r in df.collect())


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


@pytest.mark.spark
@pytest.mark.integration
def test_purge_after_har_compaction_spark_reads_identical_rows(spark, settings, tmp_path):
    with Catalog.open(settings) as catalog:
        expected = _csv_table(spark, catalog, settings, tmp_path, "maint.purged")
        before = catalog.list_partitions("maint.purged")
        summary = compact_table(
            catalog, "maint.purged", policy=CompactionPolicy(min_files=4, mode="har")
        )
        assert summary.partitions_compacted == 2
        registered = catalog.list_partitions("maint.purged")
        assert all(p.location.startswith("har://") for p in registered)

        purged = purge_superseded(catalog, "maint.purged", older_than=timedelta(0))
        assert purged.ok, purged.errors
        assert sorted(r.location for r in purged.results if r.status == "deleted") == sorted(
            p.location for p in before
        )
        assert purged.bytes_freed > 0
        for partition in before:
            assert not _local(partition.location).exists()
        assert catalog.list_partitions("maint.purged") == registered
        rows = _read_registered(spark, catalog, "maint.purged", "csv")
        assert collections.Counter((r.id, r.value) for r in rows) == expected
