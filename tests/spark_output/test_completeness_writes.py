"""Completeness with local Spark: concurrent ``write_partitions`` of disjoint regions
complete a day's 72 parts; the write that brings the last part writes the one done.
SQLite file and PostgreSQL."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog
from spark_output import CommitResult, write_partitions
from tests.spark_output.crashes import commit_together

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLE = "web.clicks"
DAY = "20261126"
REGIONS = ("us", "eu", "apac")


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", db_url=db_url)


def _region_rows(region: str) -> list[tuple[int, str, str, str]]:
    """One row in each of the region's 24 hours of the day."""
    return [(hour, DAY, region, f"{hour:02d}") for hour in range(24)]


def test_concurrent_spark_writes_of_disjoint_regions_complete_the_day_once(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    with Catalog.open(settings) as catalog:
        catalog.create_table(
            TABLE,
            location=str(tmp_path / "warehouse" / "clicks"),
            partition_keys=["datestamp", "region", "hour"],
        )
        catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu,apac", "hour=00..23"])
    # Every write is staged before any commits: the three commits then race.
    results: dict[str, CommitResult] = {}
    errors: list[BaseException] = []

    def write(region: str) -> None:
        try:
            frame = spark.createDataFrame(
                _region_rows(region), "id long, datestamp string, region string, hour string"
            )
            results[region] = write_partitions(frame, TABLE, settings=settings)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    commit_together([functools.partial(write, region) for region in REGIONS])
    assert errors == []
    assert sorted(len(result.partitions_created) for result in results.values()) == [24] * 3
    with Catalog.open(settings, upgrade=False) as catalog:
        events = catalog.outbox.catch_up([TABLE], cursor=0)
        (done,) = [event for event in events if event.event_type is EventType.MARK_SET_DONE]
        adds = [event for event in events if event.event_type is EventType.ADD_PARTITION]
        assert done.headers["HCAT_SPEC"] == f"datestamp={DAY}"
        assert (done.headers["HCAT_DONE_REASON"], done.headers["HCAT_SET_GENERATION"]) == (
            "rule",
            "1",
        )
        assert done.event_id > max(event.event_id for event in adds)
        assert len(catalog.list_partitions(TABLE)) == 72
        report = catalog.sets.state(TABLE, {"datestamp": DAY})
        assert (report.complete, report.done_event_id) == (True, done.event_id)
    # the write that brought the last part says so; the others wrote no done
    said = sorted(
        ((result.done_event_id, result.set_done_event_ids) for result in results.values()),
        key=str,
    )
    assert said == sorted([(done.event_id, (done.event_id,)), (None, ()), (None, ())], key=str)
