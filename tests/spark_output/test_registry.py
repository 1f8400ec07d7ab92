"""Spark-side lifecycle: batched announcements, INSERT on appends and overwrites, writers
other than Spark and drops with Spark's catalog in step, export → import across catalogs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog
from spark_output import (
    create_table,
    drop_partitions,
    drop_table,
    register_partitions,
    write_partitions,
)
from spark_output.transfer import export_table, import_table
from tests.wire import validate_message

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = "id long, value string, datestamp string, region string"


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", db_url=db_url, max_message_bytes=8192)


@pytest.fixture
def catalog(settings: Settings):
    with Catalog.open(settings) as opened:
        yield opened


def _rows(datestamps, regions, offset=0):
    return [
        (offset + n, f"v{offset + n}", d, r)
        for n, (d, r) in enumerate((d, r) for d in datestamps for r in regions)
    ]


def _events(catalog: Catalog, kind: EventType):
    return [e for e in catalog.outbox.events(limit=10_000) if e.event_type is kind]


def _check_insert(event, *, replace: bool) -> None:
    body = validate_message(event.headers, event.body)
    assert body["replace"] is replace
    assert body["partKeyVals"] == {"datestamp": "20110228", "region": "region-000"}
    assert body["files"]
    for location in body["files"]:  # the files the write added, where they now are
        assert Path(location.removeprefix("file://")).is_file()


def test_a_write_announced_per_write_and_its_inserts(spark, settings, catalog, tmp_path):
    table = catalog.create_table(
        "web.clicks", location=str(tmp_path / "clicks"), partition_keys=["datestamp", "region"]
    )
    regions = [f"region-{n:03d}" for n in range(150)]
    rows = _rows(["20110228"], regions)
    result = write_partitions(
        spark.createDataFrame(rows, SCHEMA),
        "web.clicks",
        settings=settings,
        announce=AnnounceMode.WRITE,
    )
    assert len(result.partitions_created) == 150
    batches = _events(catalog, EventType.ADD_PARTITION)
    assert 1 < len(batches) < 150  # split under the 8 KiB cap
    assert list(result.event_ids) == [e.event_id for e in batches]
    listed = []
    for event in batches:
        body = validate_message(event.headers, event.body)
        assert len(event.body.encode()) <= settings.max_message_bytes
        assert body["jobId"] == result.job_id
        listed += [p["region"] for p in body["partitions"]]
    assert sorted(listed) == regions

    more = [(10**6, "more", "20110228", "region-000")]
    appended = write_partitions(
        spark.createDataFrame(more, SCHEMA), "web.clicks", settings=settings
    )
    (append,) = _events(catalog, EventType.INSERT)
    _check_insert(append, replace=False)  # its files exist now; the overwrite replaces them
    replaced = write_partitions(
        spark.createDataFrame(more, SCHEMA), "web.clicks", mode="overwrite", settings=settings
    )
    overwrite = _events(catalog, EventType.INSERT)[1]
    _check_insert(overwrite, replace=True)
    assert appended.insert_event_ids == (append.event_id,)
    assert replaced.insert_event_ids == (overwrite.event_id,)
    assert json.loads(overwrite.body)["fileCount"] == len(json.loads(overwrite.body)["files"])
    assert table.topic == append.topic


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_other_writers_and_drops_keep_sparks_catalog_in_step(spark, settings, catalog, tmp_path):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("value", StringType()),
            StructField("datestamp", StringType()),
            StructField("region", StringType()),
        ]
    )
    db = f"life{os.getpid()}"
    name = f"{db}.events"
    root = tmp_path / "events"
    create_table(
        name,
        schema,
        location=str(root),
        partition_keys=["datestamp", "region"],
        settings=settings,
        spark=spark,
    )
    try:
        # Another tool wrote a partition: Parquet files in a directory outside the table.
        landed = tmp_path / "landing" / "us"
        spark.createDataFrame([(1, "a"), (2, "b")], "id long, value string").coalesce(
            1
        ).write.parquet(str(landed))
        registration, errors = register_partitions(
            name, {"datestamp=20110228/region=us": str(landed)}, settings=settings, spark=spark
        )
        assert errors == []
        assert registration.partitions[0].file_count == 1
        shown = [row[0] for row in spark.sql(f"SHOW PARTITIONS {name}").collect()]
        assert shown == ["datestamp=20110228/region=us"]
        got = spark.sql(f"SELECT id, value, region FROM {name}").collect()
        assert sorted(tuple(row) for row in got) == [(1, "a", "us"), (2, "b", "us")]

        dropped = drop_partitions(name, {"datestamp": "20110228"}, settings=settings, spark=spark)
        assert dropped.spark_catalog_errors == ()
        assert len(dropped.event_ids) == 1
        assert spark.sql(f"SHOW PARTITIONS {name}").collect() == []
        assert landed.exists()  # no purge: the files stay

        gone = drop_table(name, settings=settings, spark=spark)
        assert gone.spark_catalog_errors == ()
        assert not spark.catalog.tableExists(name)
        kinds = [e.event_type for e in catalog.outbox.events(limit=100)]
        assert kinds == [
            EventType.CREATE_TABLE,
            EventType.ADD_PARTITION,
            EventType.DROP_PARTITION,
            EventType.DROP_TABLE,
            EventType.DROP_TABLE,
        ]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_spark_reads_identical_rows_from_a_table_imported_into_another_catalog(
    spark, spark_conf, settings, catalog, tmp_path, fresh_postgres_url
):
    spark_conf("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    catalog.create_table(
        "web.clicks",
        location=str(tmp_path / "sqlite-side" / "clicks"),
        partition_keys=["datestamp", "region"],
        storage_format="parquet",
    )
    rows = _rows(["20110228", "20110301"], ["us", "eu", "a/b c"]) * 3
    rows = [(n, value, d, r) for n, (_, value, d, r) in enumerate(rows)]
    write_partitions(spark.createDataFrame(rows, SCHEMA), "web.clicks", settings=settings)
    exported = export_table(catalog, "web.clicks", to=str(tmp_path / "export"))
    assert exported.partitions == 6

    target = load_settings(home=tmp_path / "pg-home", db_url=fresh_postgres_url)
    with Catalog.open(target) as postgres:
        summary = import_table(
            postgres,
            str(tmp_path / "export"),
            location=str(tmp_path / "pg-side" / "clicks"),
            mark_done={"datestamp": "20110228"},
        )
        assert summary.table_created
        assert len(summary.partitions_created) == 6
        info = postgres.get_table("web.clicks")
        kinds = [e.event_type for e in postgres.outbox.events(limit=100)]
        assert kinds == [EventType.CREATE_TABLE] + [EventType.ADD_PARTITION] * 6 + [
            EventType.MARK_SET_DONE
        ]
        locations = [p.location for p in postgres.list_partitions("web.clicks")]
        again = import_table(postgres, str(tmp_path / "export"))
        assert again.already_imported
        assert len(postgres.outbox.events(limit=100)) == 8  # a no-op announces nothing
    assert all("pg-side" in location for location in locations)
    imported = spark.read.parquet(*[loc for loc in locations])
    assert info.location.endswith("pg-side/clicks")
    got = sorted(
        tuple(r)
        for r in spark.read.option("basePath", info.location)
        .parquet(*locations)
        .select("id", "value", "datestamp", "region")
        .collect()
    )
    assert got == sorted(rows)
    assert imported.count() == len(rows)
