"""Compaction inside the committer: staged partitions are merged or archived before publication."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog
from spark_output import CompactionPolicy, write_partitions
from tests.spark_output.frames import clicks_frame
from tests.wire import validate_message

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path / 'catalog.db'}")


def _data_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", "."))]


@pytest.mark.parametrize("storage_format", ["parquet", "orc"])
def test_merge_leaves_one_file_per_partition_and_every_row(
    spark, settings, tmp_path, storage_format
):
    with Catalog.open(settings) as catalog:
        table = catalog.create_table(
            "web.merged",
            location=str(tmp_path / "merged"),
            partition_keys=["datestamp", "region"],
            storage_format=storage_format,
        )
        df = clicks_frame(spark, partitions=20, rows=20 * 32 * 5, tasks=32)
        small = spark.createDataFrame([(10**9, "lonely", "20110228", "small")], df.schema)
        result = write_partitions(
            df.unionByName(small),
            "web.merged",
            compaction=CompactionPolicy(min_files=10),
            settings=settings,
        )
        assert len(result.partitions_created) == 21
        root = Path(table.location) / "datestamp=20110228"
        for region in range(20):
            assert len(_data_files(root / f"region=r{region:02d}")) == 1  # 32 small files merged
        assert len(_data_files(root / "region=small")) == 1  # under the trigger: untouched
        manifests = list((root / "region=r00").glob("_hcat_compaction*.json"))
        assert len(manifests) == 1
        (compaction,) = json.loads(manifests[0].read_text())["compactions"]
        assert len(compaction["originals"]) == 32
        assert not list((root / "region=small").glob("_hcat_compaction*.json"))
        registered = {p.spec.to_path(): p for p in catalog.list_partitions("web.merged")}
        assert {p.file_count for p in registered.values()} == {1}
        expected = sorted(
            (row.id, row.value, row.region) for row in df.unionByName(small).collect()
        )
        got = (
            spark.read.format(storage_format)
            .load(table.location)
            .select("id", "value", "region")
            .collect()
        )
        assert all(f.suffix == f".{storage_format}" for f in _data_files(root / "region=r00"))
        assert sorted(tuple(row) for row in got) == expected


def test_har_archives_partitions_that_spark_reads_through_har_uris(spark, settings, tmp_path):
    with Catalog.open(settings) as catalog:
        catalog.create_table(
            "web.archived",
            location=str(tmp_path / "archived"),
            partition_keys=["datestamp", "region"],
            storage_format="csv",
        )
        df = clicks_frame(spark, partitions=3, rows=3 * 8 * 4, tasks=8)
        write_partitions(
            df,
            "web.archived",
            compaction=CompactionPolicy(min_files=4, mode="har"),
            settings=settings,
        )
        partitions = catalog.list_partitions("web.archived")
        assert len(partitions) == 3
        for partition in partitions:
            assert partition.archived
            assert partition.location.startswith("har://file-localhost/")
            assert partition.location.endswith("/_hcat_archive.har")
            assert partition.file_count == 8
            region = partition.spec.as_dict()["region"]
            rows = spark.read.schema("id long, value string").csv(partition.location).collect()
            expected = [(r.id, r.value) for r in df.where(f"region = '{region}'").collect()]
            assert sorted(tuple(row) for row in rows) == sorted(expected)
        added = [e for e in catalog.outbox.events() if e.event_type is EventType.ADD_PARTITION]
        for event in added:
            body = validate_message(event.headers, event.body)
            assert body["location"].startswith("har://")
        assert {json.loads(e.body)["location"] for e in added} == {p.location for p in partitions}


def test_append_follows_a_partition_that_maintenance_relocated(spark, settings, tmp_path):
    from spark_output import compact_table
    from spark_output.errors import CommitError

    with Catalog.open(settings) as catalog:
        catalog.create_table(
            "web.relocated",
            location=str(tmp_path / "relocated"),
            partition_keys=["datestamp", "region"],
        )
        first = clicks_frame(spark, partitions=1, rows=12 * 4, tasks=12)
        write_partitions(first, "web.relocated", settings=settings)
        summary = compact_table(catalog, "web.relocated", policy=CompactionPolicy(min_files=4))
        assert summary.partitions_compacted == 1
        (moved,) = catalog.list_partitions("web.relocated")
        assert "_hcat_compacted" in moved.location
        more = spark.createDataFrame([(10**6, "late", "20110228", "r00")], first.schema)
        result = write_partitions(more, "web.relocated", settings=settings)
        assert result.partitions_appended == ("datestamp=20110228/region=r00",)
        (after,) = catalog.list_partitions("web.relocated")
        assert after.location == moved.location
        got = spark.read.parquet(after.location).select("id").collect()
        assert sorted(row.id for row in got) == sorted([r.id for r in first.collect()] + [10**6])

        archived = CompactionPolicy(min_files=2, mode="har")
        catalog.create_table(
            "web.har", location=str(tmp_path / "har"), partition_keys=["datestamp", "region"]
        )
        write_partitions(first, "web.har", compaction=archived, settings=settings)
        with pytest.raises(CommitError, match=r"is archived .* overwrite the partition instead"):
            write_partitions(more, "web.har", settings=settings)
        overwritten = write_partitions(more, "web.har", mode="overwrite", settings=settings)
        assert overwritten.partitions_replaced == ("datestamp=20110228/region=r00",)
