"""Tables the maintenance tests compact and purge, and ways to look at them."""

from __future__ import annotations

import collections
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hcat_notify.store import Catalog, NewPartition
from spark_output import CompactionPolicy, write_partitions
from spark_output.fs import TableLocation
from spark_output.maintenance.marker import SUPERSEDED_MARKER
from spark_output.maintenance.table_compaction import compact_table
from tests.spark_output.frames import clicks_frame


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
    catalog.add_partitions(name, new)
    return root


def _rows_at(location: str) -> collections.Counter[tuple[Any, ...]]:
    path = _local(location)
    table = pq.read_table([str(p) for p in _data_files(path)])
    return collections.Counter(
        zip(table["id"].to_pylist(), table["value"].to_pylist(), strict=True)
    )


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


def _read_registered(spark, catalog: Catalog, table: str, fmt: str = "parquet"):
    locations = [p.location for p in catalog.list_partitions(table)]
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.schema("id long, value string")
    return reader.load(locations).select("id", "value").collect()


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
