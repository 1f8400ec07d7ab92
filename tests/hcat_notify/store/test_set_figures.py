"""The completeness figures of ``/metrics`` (sets late, parts missing, done latencies):
right for every kind of rule, from the counts on the set rows; a scrape's work does not
grow with the years of sets done (issue 31)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, select, text, update

from hcat_notify.model.completeness import SetState
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.set_figures import DONE_WINDOW
from tests.fixtures.catalog_rows import bulk_insert
from tests.fixtures.sqlite_work import sqlite_work
from tests.integration.api.sets import sets_of_every_kind

BOUNDS = (0.0, 60.0)
DAY = ("datestamp", "region")


def _table(catalog: Catalog, name: str) -> str:
    catalog.create_table(name, location=f"/w/{name}", partition_keys=list(DAY))
    return name


def _add(catalog: Catalog, name: str, day: str, *regions: str) -> None:
    catalog.add_partitions(
        name, [NewPartition({"datestamp": day, "region": r}, f"/d/{name}") for r in regions]
    )


def _missing_by_reading(catalog: Catalog, name: str, days: list[str]) -> int:
    """The parts missing from the table's sets not done, as ``completeness`` reports
    them (read from the partitions)."""
    total = 0
    for day in days:
        report = catalog.sets.state(name, {"datestamp": day})
        if report.state in (None, SetState.DONE) or report.expected is None:
            continue
        total += max(len(report.missing), report.expected - len(report.present))
    return total


def test_figures_count_late_sets_missing_parts_and_the_last_days_done_latencies(
    catalog: Catalog,
):
    every = _table(catalog, "f.every")
    sets_of_every_kind(catalog, every)
    at_least = _table(catalog, "f.minimum")
    catalog.expect(at_least, set_keys="datestamp", min_partitions=3)
    _add(catalog, at_least, "20260101", "us")
    previous = _table(catalog, "f.previous")
    catalog.expect(previous, set_keys="datestamp", like_previous=True)
    _add(catalog, previous, "20260101", "us", "eu", "apac")
    _add(catalog, previous, "20260102", "eu")
    changed = _table(catalog, "f.changed")  # counts kept under rule 1, judged by rule 2
    catalog.expect(changed, set_keys="datestamp", parts=["region=us,eu"])
    _add(catalog, changed, "20260101", "us")
    catalog.expect(changed, set_keys="datestamp", parts=["region=us,eu,apac"])

    figures = catalog.sets.figures(BOUNDS)

    days = ["20260101", "20260102", "20260103", "20260104"]
    assert figures.late == {every: 1, at_least: 0, previous: 0, changed: 0}
    assert figures.missing == {
        name: _missing_by_reading(catalog, name, days)
        for name in (every, at_least, previous, changed)
    }
    assert figures.missing[every] == 3  # 20260103 misses eu and apac, 20260104 apac
    assert figures.missing[at_least] == 2
    assert figures.missing[previous] == 2
    assert figures.missing[changed] == 2
    # every's 20260101 done by its rule, 20260102 again at generation 2, both at once
    rule, again = figures.done_latency["rule"], figures.done_latency["changed"]
    assert (rule.count, again.count) == (1, 1)
    assert rule.at_most == (1, 1)
    assert again.at_most == (1, 1)
    assert rule.total == 0.0


def _age_dones(db_url: str, seconds: float) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(SetStateRow)
                .where(SetStateRow.state == SetState.DONE.value)
                .values(
                    done_at=SetStateRow.done_at - seconds,
                    last_change_at=SetStateRow.last_change_at - seconds,
                )
            )
    finally:
        engine.dispose()


def test_dones_older_than_the_window_leave_the_latency_figures(catalog: Catalog, db_url: str):
    name = _table(catalog, "f.window")
    catalog.expect(name, set_keys="datestamp", parts=["region=us"])
    _add(catalog, name, "20260101", "us")
    assert catalog.sets.figures(BOUNDS).done_latency["rule"].count == 1
    _age_dones(db_url, DONE_WINDOW + 60)
    assert catalog.sets.figures(BOUNDS).done_latency == {}
    _add(catalog, name, "20260102", "us")
    assert catalog.sets.figures(BOUNDS).done_latency["rule"].count == 1


def _old_dones(db_url: str, table_id: int, first: int, count: int, done_at: float) -> None:
    rows: list[dict[str, Any]] = [
        {
            "table_id": table_id,
            "set_spec": f"datestamp={n:08d}",
            "bucket": 0,
            "generation": 1,
            "state": SetState.DONE.value,
            "rule_version": 1,
            "first_part_at": done_at,
            "last_change_at": done_at,
            "done_at": done_at,
            "done_reason": "rule",
            "part_count": 1,
            "expected_present": 1,
        }
        for n in range(first, first + count)
    ]
    bulk_insert(db_url, SetStateRow, rows)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_scrape_does_the_same_work_with_100_and_20000_sets_done_long_ago(
    catalog: Catalog, db_url: str
):
    name = _table(catalog, "f.years")
    catalog.expect(name, set_keys="datestamp", parts=["region=us,eu"])
    _add(catalog, name, "20990101", "us")  # one set open, one part missing
    engine = create_engine(db_url)
    with engine.connect() as connection:
        table_id = connection.execute(
            select(TableRow.id).where(TableRow.db_name == "f", TableRow.table_name == "years")
        ).scalar_one()
    engine.dispose()
    long_ago = catalog.group.info().now - 400 * 86400
    _old_dones(db_url, table_id, 0, 100, long_ago)
    small = sqlite_work(lambda: catalog.sets.figures(BOUNDS))
    _old_dones(db_url, table_id, 100, 20_000, long_ago)
    large = sqlite_work(lambda: catalog.sets.figures(BOUNDS))
    figures = catalog.sets.figures(BOUNDS)
    assert figures.missing == {name: 1}
    assert figures.done_latency == {}
    assert large <= 1.5 * small + 2, (small, large)


COUNTED = ("last_change_at", "part_count", "expected_present")
"""The columns of a set's row that every counting write changes."""


def test_no_index_of_the_set_rows_holds_a_column_every_counting_write_changes(db_url: str):
    """A write that only counts (most adds under a rule) then rewrites no index entry:
    a HOT update on PostgreSQL, no index page on SQLite (the write path's cost, issue
    28; an index of last_change_at made every such update a full one)."""
    if db_url.startswith("sqlite"):
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = :t"
    else:
        query = "SELECT indexdef FROM pg_indexes WHERE tablename = :t"
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            definitions = [
                row[0] for row in connection.execute(text(query), {"t": "hcat_set_states"})
            ]
    finally:
        engine.dispose()
    indexes = [d for d in definitions if d is not None and "_pkey" not in d]
    assert len(indexes) >= 3, definitions  # bucket/due, not done, done by time
    for definition in indexes:
        assert not [c for c in COUNTED if c in definition], definition
