"""The warehouse boundary in the store: every path that registers or moves a location
(the commit journal of write_partitions and import, add_partitions, a partition's new
location) refuses one outside the roots, before anything is written (SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError, LocationOutsideWarehouseError
from hcat_notify.store import Catalog, NewPartition, table_definition


@pytest.fixture
def narrow(db_url: str, tmp_path: Path) -> Iterator[Catalog]:
    settings = load_settings(
        home=tmp_path / "home", db_url=db_url, warehouse_roots=[str(tmp_path / "wh")]
    )
    with Catalog.open(settings) as catalog:
        yield catalog


def _state(catalog: Catalog) -> tuple[int, int, int]:
    tables = catalog.list_tables()
    partitions = sum(len(catalog.list_partitions(t.name)) for t in tables)
    return len(tables), partitions, catalog.last_event_id() or 0


def _begin(catalog: Catalog, job: str, **extra) -> None:
    catalog.commits.begin(
        job,
        "web.t",
        mode="append",
        partitions=["ds=1"],
        plan={},
        started_at=datetime.now(UTC),
        **extra,
    )


def test_a_write_that_would_create_a_table_outside_the_roots_is_refused(
    narrow: Catalog, tmp_path: Path
):
    before = _state(narrow)
    for location, error in [
        (str(tmp_path / "elsewhere"), LocationOutsideWarehouseError),
        (f"{tmp_path}/wh/../elsewhere", InvalidInputError),
    ]:
        definition = table_definition(location=location, partition_keys=["ds"])
        with pytest.raises(error):
            _begin(narrow, f"job-{len(location)}", create_table=definition)
    assert _state(narrow) == before
    assert narrow.commits.pending() == []


def test_writes_into_a_table_outside_the_roots_are_refused_before_anything_moves(
    db_url: str, tmp_path: Path, narrow: Catalog
):
    wide = load_settings(home=tmp_path / "home", db_url=db_url, warehouse_roots=[str(tmp_path)])
    with Catalog.open(wide) as catalog:  # registered before the operator narrowed the roots
        catalog.create_table("web.t", location=str(tmp_path / "old"), partition_keys=["ds"])
    with pytest.raises(LocationOutsideWarehouseError, match=r"location of table web\.t"):
        _begin(narrow, "job-1")
    assert narrow.commits.pending() == []
    with pytest.raises(LocationOutsideWarehouseError):
        narrow.add_partitions("web.t", [NewPartition({"ds": "1"}, str(tmp_path / "old/ds=1"))])
    assert narrow.list_partitions("web.t") == []


def test_a_partition_cannot_be_moved_outside_the_roots(narrow: Catalog, tmp_path: Path):
    inside = tmp_path / "wh" / "t"
    narrow.create_table("web.t", location=str(inside), partition_keys=["ds"])
    (added,) = narrow.add_partitions("web.t", [NewPartition({"ds": "1"}, str(inside / "ds=1"))])
    with pytest.raises(LocationOutsideWarehouseError):
        narrow.partitions.update(
            "web.t", {"ds": "1"}, expected_version=1, location=str(tmp_path / "x")
        )
    assert narrow.partitions.get("web.t", {"ds": "1"}) == added
