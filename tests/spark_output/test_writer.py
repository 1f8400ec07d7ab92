"""write_partitions with local Spark, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import ConcurrentWriteError, InvalidSpecError, UnknownPartitionKeyError
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, TableInfo
from spark_output import (
    PartitionColumnsError,
    TooManyPartitionsError,
    WriteFailedError,
    create_table,
    recover,
    write_partitions,
)
from tests.spark_output.crashes import (
    SimulatedCrash,
    commit_together,
    crash_after_moves,
    crash_before_moves,
)
from tests.wire import validate_message

pytestmark = [pytest.mark.spark, pytest.mark.integration]

REGIONS = [f"r{n:02d}" for n in range(30)]


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", db_url=db_url)


@pytest.fixture
def catalog(settings: Settings):
    with Catalog.open(settings) as opened:
        yield opened


@pytest.fixture
def table(catalog: Catalog, tmp_path: Path) -> TableInfo:
    return catalog.create_table(
        "web.clicks",
        location=str(tmp_path / "warehouse" / "clicks"),
        partition_keys=["datestamp", "region"],
    )


def _events(catalog: Catalog):
    """What writes announced: the outbox less the table's CREATE_TABLE."""
    return [
        e for e in catalog.outbox.events(limit=10_000) if e.event_type is not EventType.CREATE_TABLE
    ]


def _frame(spark, rows):
    return spark.createDataFrame(rows, "id long, value string, datestamp string, region string")


def _rows(datestamps, regions, per=3, offset=0):
    return [
        (offset + i * 1000 + j, f"v{offset + i * 1000 + j}", d, r)
        for i, (d, r) in enumerate((d, r) for d in datestamps for r in regions)
        for j in range(per)
    ]


def _tree(root: Path) -> dict[str, str]:
    """Every file under root with the hash of its bytes: 'byte for byte unchanged'."""
    if not root.exists():
        return {}
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _visible_partitions(root: Path) -> set[str]:
    return {
        str(path.relative_to(root))
        for path in root.glob("*/*")
        if path.is_dir() and not path.parts[-2].startswith("_")
    }


def _read(spark, table: TableInfo) -> list[tuple[Any, ...]]:
    df = spark.read.option("basePath", table.location).parquet(
        f"{table.location}/datestamp=*/region=*"
    )
    # Spark infers 20110228 to be a number; the table's values are strings.
    df = df.selectExpr("id", "value", "CAST(datestamp AS STRING) AS datestamp", "region")
    return sorted(tuple(row) for row in df.collect())


def test_append_across_60_partitions_registers_and_announces_each(spark, settings, catalog, table):
    rows = _rows(["20110228", "20110301"], REGIONS)
    result = write_partitions(
        _frame(spark, rows),
        "web.clicks",
        mark_set_done={"datestamp": "20110228"},
        settings=settings,
    )
    root = Path(table.location)
    assert len(result.partitions_created) == 60
    assert _visible_partitions(root) == set(result.partitions_created)
    assert _read(spark, table) == sorted(rows)
    assert not (root / "_hcat_staging").exists()
    registered = catalog.list_partitions("web.clicks")
    assert len(registered) == 60
    assert all(p.job_id == result.job_id and p.file_count >= 1 for p in registered)
    assert sum(p.file_count for p in registered) == result.files
    events = _events(catalog)
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 60 + [
        EventType.MARK_SET_DONE
    ]
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)
    assert list(result.event_ids) == [e.event_id for e in events[:60]]
    assert result.done_event_id == events[-1].event_id
    for event in events:
        validate_message(event.headers, event.body)
    body = json.loads(events[0].body)
    assert body["location"].startswith("file://")
    assert body["jobId"] == result.job_id
    assert set(result.phase_seconds) >= {"stage", "discover", "journal", "move", "register"}

    # Append again: 10 existing partitions get more files, 10 new ones are announced.
    more = _rows(["20110301"], REGIONS[:10], offset=10**6) + _rows(
        ["20110302"], REGIONS[:10], offset=2 * 10**6
    )
    before = {p.spec.to_path(): p.file_count for p in registered}
    again = write_partitions(_frame(spark, more), "web.clicks", settings=settings)
    assert len(again.partitions_created) == 10
    assert len(again.partitions_appended) == 10
    assert all(p.startswith("datestamp=20110302/") for p in again.partitions_created)
    assert _read(spark, table) == sorted(rows + more)  # nothing clobbered
    events = _events(catalog)
    assert len(events) == 61 + 10 + 10  # and an INSERT for each partition that existed
    inserts = [e for e in events if e.event_type is EventType.INSERT]
    assert sorted(e.headers["HCAT_SPEC"] for e in inserts) == sorted(again.partitions_appended)
    assert list(again.insert_event_ids) == [e.event_id for e in inserts]
    assert all(json.loads(e.body)["replace"] is False for e in inserts)
    after = {p.spec.to_path(): p.file_count for p in catalog.list_partitions("web.clicks")}
    for path in again.partitions_appended:
        assert after[path] > before[path]


def test_overwrite_replaces_exactly_the_partitions_written(spark, settings, catalog, table):
    rows = _rows(["20110228"], REGIONS[:5])
    write_partitions(_frame(spark, rows), "web.clicks", settings=settings)
    events_before = len(_events(catalog))
    replacement = [(9, "new", "20110228", "r01"), (10, "new", "20110228", "r02")]
    result = write_partitions(
        _frame(spark, replacement), "web.clicks", mode="overwrite", settings=settings
    )
    assert sorted(result.partitions_replaced) == [
        "datestamp=20110228/region=r01",
        "datestamp=20110228/region=r02",
    ]
    assert result.partitions_created == ()
    kept = [row for row in rows if row[3] not in ("r01", "r02")]
    assert _read(spark, table) == sorted(kept + replacement)
    inserts = _events(catalog)[events_before:]  # replaced, not new: an INSERT each
    assert [e.event_type for e in inserts] == [EventType.INSERT] * 2
    assert all(json.loads(e.body)["replace"] is True for e in inserts)
    part = catalog.partitions.get("web.clicks", {"datestamp": "20110228", "region": "r01"})
    assert part is not None
    assert part.job_id == result.job_id
    assert part.version == 2
    assert not (Path(table.location) / "_hcat_trash").exists()


def test_failing_task_leaves_the_table_byte_for_byte_unchanged(spark, settings, catalog, table):
    from pyspark.sql import functions as sf

    write_partitions(
        _frame(spark, _rows(["20110228"], REGIONS[:3])), "web.clicks", settings=settings
    )
    root = Path(table.location)
    before, events, parts = _tree(root), _events(catalog), catalog.list_partitions("web.clicks")

    @sf.udf(returnType="string", useArrow=False)
    def explode_on_r07(region):
        if region == "r07":
            raise ValueError("boom in r07")
        return region

    df = _frame(spark, _rows(["20110301"], REGIONS[:10])).withColumn(
        "region", explode_on_r07("region")
    )
    with pytest.raises(
        WriteFailedError, match=r"the Spark job writing web\.clicks failed; the table is unchanged"
    ):
        write_partitions(
            df, "web.clicks", settings=settings, mark_set_done={"datestamp": "20110301"}
        )
    assert _tree(root) == before
    assert _events(catalog) == events
    assert catalog.list_partitions("web.clicks") == parts
    assert catalog.retained_dones(["web.clicks"]) == []


def test_crash_between_moves_and_commit_is_rolled_forward_by_recover(
    spark, settings, catalog, table
):
    rows = _rows(["20110228"], REGIONS[:4])
    with crash_after_moves(), pytest.raises(SimulatedCrash):
        write_partitions(
            _frame(spark, rows),
            "web.clicks",
            settings=settings,
            mark_set_done={"datestamp": "20110228"},
        )
    root = Path(table.location)
    assert len(_visible_partitions(root)) == 4  # files are in place ...
    assert catalog.list_partitions("web.clicks") == []  # ... but not registered or announced
    assert _events(catalog) == []
    # the job's entry, and the one its staging was journalled by before Spark wrote
    staged, pending = catalog.commits.pending("web.clicks")  # oldest first
    assert staged.job_id == f"{pending.job_id}.staging"

    outcomes = recover(catalog, "web.clicks")  # the staging entry closed with the job's
    assert [(o.job_id, o.action) for o in outcomes] == [(pending.job_id, "rolled forward")]
    assert {p.spec.to_path() for p in catalog.list_partitions("web.clicks")} == _visible_partitions(
        root
    )
    events = _events(catalog)
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 4 + [
        EventType.MARK_SET_DONE
    ]
    assert {e.headers["HCAT_SPEC"] for e in events[:4]} == _visible_partitions(root)
    assert _read(spark, table) == sorted(rows)
    assert not (root / "_hcat_staging").exists()
    assert recover(catalog, "web.clicks") == []


def test_crash_before_the_moves_is_rolled_back_by_the_next_write(spark, settings, catalog, table):
    with crash_before_moves(), pytest.raises(SimulatedCrash):
        write_partitions(
            _frame(spark, _rows(["20110228"], REGIONS[:2])),
            "web.clicks",
            settings=settings,
        )
    assert len(catalog.commits.pending("web.clicks")) == 2  # the job's, and its staging's
    rows = _rows(["20110301"], REGIONS[:2])
    result = write_partitions(
        _frame(spark, rows), "web.clicks", settings=settings
    )  # recovers first
    assert catalog.commits.pending("web.clicks") == []
    assert _visible_partitions(Path(table.location)) == set(result.partitions_created)
    assert _read(spark, table) == sorted(rows)  # the crashed write left nothing visible
    assert [e.headers["HCAT_SPEC"] for e in _events(catalog)] == sorted(result.partitions_created)


def test_a_retry_of_a_job_id_whose_writer_died_in_the_spark_phase_writes(
    spark, settings, catalog, table, monkeypatch
):
    # third trust review (LOW): the writer journals its staging before Spark writes, so
    # the next write removes what a writer that died there left (it was refused until
    # removed by hand), and no other entry can claim that staging while Spark writes
    from pyspark.sql import DataFrameWriter

    staging = Path(table.location) / "_hcat_staging" / "daily-1"
    real_save = DataFrameWriter.save
    seen: list[str] = []

    def died_part_way(self: DataFrameWriter, *args: Any, **kwargs: Any) -> None:
        (staging / "datestamp=20110228" / "region=us").mkdir(parents=True)
        (staging / "datestamp=20110228" / "region=us" / "part-00000-half.parquet").write_text("")
        raise SimulatedCrash("the writer died while Spark wrote")

    def journalled_first(self: DataFrameWriter, *args: Any, **kwargs: Any) -> None:
        seen.extend(entry.job_id for entry in catalog.commits.pending("web.clicks"))
        real_save(self, *args, **kwargs)

    frame = _frame(spark, _rows(["20110228"], ["us"]))
    monkeypatch.setattr(DataFrameWriter, "save", died_part_way)
    with pytest.raises(SimulatedCrash):
        write_partitions(frame, "web.clicks", job_id="daily-1", settings=settings)
    monkeypatch.setattr(DataFrameWriter, "save", journalled_first)
    result = write_partitions(frame, "web.clicks", job_id="daily-1", settings=settings)
    assert seen == ["daily-1.staging"]  # pending (and this process's) while Spark wrote
    assert result.partitions_created == ("datestamp=20110228/region=us",)
    (written,) = catalog.list_partitions("web.clicks")
    assert "part-00000-half.parquet" not in os.listdir(written.location.removeprefix("file://"))
    assert catalog.commits.pending() == []
    assert not staging.exists()


def test_rerunning_a_committed_job_id_is_a_no_op(spark, settings, catalog, table):
    rows = _rows(["20110228"], REGIONS[:2])
    first = write_partitions(_frame(spark, rows), "web.clicks", settings=settings, job_id="job-42")
    again = write_partitions(_frame(spark, rows), "web.clicks", settings=settings, job_id="job-42")
    assert again.already_committed
    assert again.partitions_created == first.partitions_created
    assert _read(spark, table) == sorted(rows)
    assert len(_events(catalog)) == 2


def test_concurrent_jobs_on_different_partitions_both_commit(spark, settings, catalog, table):
    results, errors = [], []

    def job(regions, offset):
        try:
            rows = _rows(["20110228"], regions, offset=offset)
            results.append(
                (
                    rows,
                    write_partitions(_frame(spark, rows), "web.clicks", settings=settings),
                )
            )
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    commit_together([lambda: job(REGIONS[:5], 0), lambda: job(REGIONS[5:10], 10**6)])
    assert errors == []
    assert len(results) == 2
    assert _read(spark, table) == sorted(results[0][0] + results[1][0])
    assert len(catalog.list_partitions("web.clicks")) == 10
    assert len(_events(catalog)) == 10


def test_concurrent_overwrites_of_one_partition_have_one_winner(spark, settings, catalog, table):
    write_partitions(
        _frame(spark, [(1, "old", "20110228", "r01")]), "web.clicks", settings=settings
    )
    outcomes: dict[str, object] = {}

    def job(tag):
        try:
            rows = [(2, tag, "20110228", "r01")]
            outcomes[tag] = write_partitions(
                _frame(spark, rows), "web.clicks", mode="overwrite", settings=settings
            )
        except Exception as exc:  # noqa: BLE001 - asserted below
            outcomes[tag] = exc

    commit_together([lambda: job("a"), lambda: job("b")])
    errors = [value for value in outcomes.values() if isinstance(value, Exception)]
    assert len(errors) == 1
    assert isinstance(errors[0], ConcurrentWriteError)
    assert "datestamp=20110228/region=r01" in str(errors[0])
    assert "nothing was changed" in str(errors[0])
    winner = next(tag for tag, value in outcomes.items() if not isinstance(value, Exception))
    assert _read(spark, table) == [(2, winner, "20110228", "r01")]
    assert not list((Path(table.location) / "_hcat_staging").glob("*"))  # the loser cleaned up


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_values_needing_escapes_survive_spark_registry_and_messages(
    spark, spark_conf, settings, catalog, table
):
    spark_conf("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    values = ["a/b", "k=v", "100%", "spa ce", "Zürich 日本", None]
    rows = [(n, "x", "d", value) for n, value in enumerate(values)]
    result = write_partitions(_frame(spark, rows), "web.clicks", settings=settings)
    registered = {p.spec.as_dict()["region"] for p in catalog.list_partitions("web.clicks")}
    assert registered == set(values)
    messages = [json.loads(e.body)["partitions"][0]["region"] for e in _events(catalog)]
    assert sorted(messages) == sorted(
        "__HIVE_DEFAULT_PARTITION__" if v is None else v for v in values
    )
    read = spark.read.parquet(table.location).select("id", "region").collect()
    assert sorted((row["id"], row["region"]) for row in read) == [
        (n, v) for n, v in enumerate(values)
    ]
    assert len(result.partitions_created) == 6


def test_max_partitions_exceeded_publishes_nothing(spark, settings, catalog, table):
    rows = _rows(["20110228"], REGIONS[:12])
    with pytest.raises(
        TooManyPartitionsError, match=r"more than 10 partitions \(max_partitions=10"
    ):
        write_partitions(_frame(spark, rows), "web.clicks", settings=settings, max_partitions=10)
    assert _tree(Path(table.location)) == {}
    assert catalog.list_partitions("web.clicks") == []
    assert _events(catalog) == []


@pytest.mark.parametrize(
    ("kwargs", "columns", "match"),
    [
        ({"partition_by": ["region", "datestamp"]}, None, "does not match the partition keys"),
        ({"partition_by": ["datestamp"]}, None, "does not match the partition keys"),
        ({}, "id long, value string, datestamp string", r"no column\(s\) \['region'\]"),
    ],
)
def test_partition_columns_mismatch_fails_before_any_spark_job(
    spark, settings, catalog, table, kwargs, columns, match
):
    rows = [(1, "x", "d", "r")] if columns is None else [(1, "x", "d")]
    df = spark.createDataFrame(
        rows, columns or "id long, value string, datestamp string, region string"
    )
    group = f"hcat-mismatch-{os.getpid()}-{id(kwargs)}"
    spark.sparkContext.setJobGroup(group, "partition column check")
    try:
        with pytest.raises(PartitionColumnsError, match=match):
            write_partitions(df, "web.clicks", settings=settings, **kwargs)
        assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert not Path(table.location).exists()


def test_bad_mark_set_done_spec_fails_before_writing(spark, settings, catalog, table):
    with pytest.raises(UnknownPartitionKeyError, match="hour"):
        write_partitions(
            _frame(spark, _rows(["d"], ["r"])),
            "web.clicks",
            settings=settings,
            mark_set_done={"hour": "1"},
        )
    assert not Path(table.location).exists()


def test_a_done_that_skips_a_leading_key_fails_before_writing(spark, settings, catalog, table):
    with pytest.raises(InvalidSpecError, match="skips the leading partition key datestamp"):
        write_partitions(
            _frame(spark, _rows(["d"], ["r"])),
            "web.clicks",
            settings=settings,
            mark_set_done={"region": "r"},
        )
    assert not Path(table.location).exists()
    assert [e for e in catalog.outbox.events(limit=100) if not e.event_type.about_table] == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_spark_sql_readers_see_committed_partitions(spark, settings, catalog, tmp_path):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("value", StringType()),
            StructField("datestamp", StringType()),
            StructField("region", StringType()),
        ]
    )
    db = f"hive{os.getpid()}"
    create_table(
        f"{db}.events",
        schema,
        location=str(tmp_path / "hive" / "events"),
        partition_keys=["datestamp", "region"],
        settings=settings,
        spark=spark,
    )
    try:
        rows = _rows(["20110228"], ["us", "eu"])
        write_partitions(_frame(spark, rows), f"{db}.events", settings=settings)
        shown = sorted(row[0] for row in spark.sql(f"SHOW PARTITIONS {db}.events").collect())
        assert shown == ["datestamp=20110228/region=eu", "datestamp=20110228/region=us"]
        got = spark.sql(f"SELECT id, value, datestamp, region FROM {db}.events").collect()
        assert sorted(tuple(row) for row in got) == sorted(rows)
        write_partitions(
            _frame(spark, [(7, "new", "20110228", "us")]),
            f"{db}.events",
            mode="overwrite",
            settings=settings,
        )
        got = spark.sql(f"SELECT id FROM {db}.events WHERE region = 'us'").collect()
        assert [row[0] for row in got] == [7]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
