"""Compaction never reads or writes through a partition's directory (or one above it)
swapped for a link to a directory outside the warehouse: each directory is reached from
the warehouse root or the table's location without following a link, the files linked
or copied and the superseded marker written relative to it (fifth security review,
finding 1; docs/operations.md, "Warehouse roots"). Nothing outside is archived, merged
into the table or written; the registry is unchanged, the failure names the link."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hcat_notify.store import Catalog
from spark_output import CompactionPolicy
from spark_output.maintenance import table_compaction
from spark_output.maintenance.marker import SUPERSEDED_MARKER
from spark_output.maintenance.table_compaction import compact_table
from tests.spark_output.maintenance.tables import A, _pyarrow_table, _snapshot

SECRET = "ROOT-ONLY SECRET"


def _outside(tmp_path: Path, partition: Path) -> Path:
    """A directory outside the warehouse whose Parquet files bear the partition's names."""
    outside = tmp_path / "outside" / "vdir"
    (outside / "region=a").mkdir(parents=True)  # for a link one level above the partition
    for path in sorted(partition.iterdir()):
        for where in (outside, outside / "region=a"):
            pq.write_table(pa.table({"id": [-1], "value": [SECRET]}), where / path.name)
    return outside


def _swap_for_link(directory: Path, to: Path) -> None:
    directory.rename(directory.with_name(f".{directory.name}.orig"))
    directory.symlink_to(to, target_is_directory=True)


def _secret_inside(warehouse: Path) -> list[str]:
    return [
        str(path)
        for path in warehouse.rglob("*")
        if path.is_file() and not path.is_symlink() and SECRET.encode() in path.read_bytes()
    ]


def _table(catalog: Catalog, warehouse: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, int]]:
    root = _pyarrow_table(catalog, warehouse, "web.t", {"a": 3}, rows_per_file=2)
    outside = _outside(tmp_path, root / A)
    return root, outside, _snapshot(outside)


def _refused(catalog: Catalog, mode: Literal["merge", "har"], link: Path) -> None:
    before = catalog.list_partitions("web.t")
    summary = compact_table(
        catalog, "web.t", policy=CompactionPolicy(mode=mode, min_files=2), workers=1
    )
    assert (summary.partitions_compacted, summary.partitions_failed) == (0, 1)
    (error,) = summary.errors
    assert f"{link} is a symbolic link" in error, error
    assert catalog.list_partitions("web.t") == before


@pytest.mark.parametrize("where", ["partition", "above"])
def test_a_partition_directory_swapped_for_a_link_is_not_compacted(
    narrow_warehouse: Path, catalog: Catalog, tmp_path: Path, where: str
) -> None:
    root, outside, before = _table(catalog, narrow_warehouse, tmp_path)
    link = root / A if where == "partition" else (root / A).parent
    _swap_for_link(link, outside)
    _refused(catalog, "merge", link)
    assert _secret_inside(narrow_warehouse) == []
    assert _snapshot(outside) == before  # no marker, nothing else written there


@pytest.mark.parametrize("mode", ["har", "merge"])
def test_a_directory_swapped_after_planning_is_not_read(
    narrow_warehouse: Path,
    catalog: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: Literal["merge", "har"],
) -> None:
    root, outside, before = _table(catalog, narrow_warehouse, tmp_path)
    compact_one = table_compaction._compact_one

    def swap_then_compact(plan: table_compaction.PartitionPlan) -> object:
        _swap_for_link(root / A, outside)  # after the listing, before the links/copies
        return compact_one(plan)

    monkeypatch.setattr(table_compaction, "_compact_one", swap_then_compact)
    _refused(catalog, mode, root / A)
    assert _secret_inside(narrow_warehouse) == []
    assert not list((root / "_hcat_compacted").rglob("*.parquet"))
    assert _snapshot(outside) == before


def test_no_marker_is_written_through_a_directory_swapped_before_the_switch(
    narrow_warehouse: Path, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside, before = _table(catalog, narrow_warehouse, tmp_path)
    switch = table_compaction.switch_location

    def swap_then_switch(*args: object, **kwargs: object) -> None:
        _swap_for_link(root / A, outside)  # after the copy, before the marker
        switch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table_compaction, "switch_location", swap_then_switch)
    summary = compact_table(catalog, "web.t", policy=CompactionPolicy(min_files=2), workers=1)
    assert summary.partitions_compacted == 1  # from the real files, listed and linked
    assert _snapshot(outside) == before
    assert not (outside / SUPERSEDED_MARKER).exists()
    assert _secret_inside(narrow_warehouse) == []
