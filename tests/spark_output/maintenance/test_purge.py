"""purge_superseded: deleting what compactions superseded, only when it is safe."""

from __future__ import annotations

import collections
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hcat_notify.errors import TableNotFoundError, UnknownPartitionKeyError
from hcat_notify.store import Catalog
from spark_output import CompactionError, CompactionPolicy
from spark_output.maintenance.marker import SUPERSEDED_MARKER
from spark_output.maintenance.purge import DEFAULT_PURGE_AGE, purge_superseded
from spark_output.maintenance.table_compaction import COMPACTED_DIR, compact_table
from tests.spark_output.maintenance.tables import (
    A,
    B,
    _age_markers,
    _compacted,
    _csv_table,
    _data_files,
    _local,
    _read_registered,
    _rows_at,
    _snapshot,
)


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
        catalog.partitions.update(
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
        current = catalog.partitions.get("web.keep", {"datestamp": "20110228", "region": "a"})
        assert current is not None
        catalog.partitions.update(
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
        current = catalog.partitions.get("web.unsafe", {"datestamp": "20110228", "region": "a"})
        assert current is not None
        elsewhere = tmp_path / "elsewhere"
        _local(current.location).rename(elsewhere)
        catalog.partitions.update(
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
