"""The Parquet/ORC merge, the data-file listing it starts from, and compact_partition.

The Spark tests write a partition the way a job does (30 small files), merge it with
pyarrow and check that Spark reads the same multiset of rows, with the same schema,
Spark metadata and codec.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from spark_output.compaction.checksum import compute_checksum
from spark_output.compaction.manifest import MANIFEST_NAME
from spark_output.compaction.merge import SPARK_ROW_METADATA, merge_partition
from spark_output.compaction.partition import compact_partition
from spark_output.compaction.policy import CompactionPolicy
from spark_output.compaction.staged import compact_staged
from spark_output.errors import CompactionError, VerificationError
from spark_output.fs import list_data_files as data_files
from tests.spark_output.compaction.damage import damaged_merges

LOCAL = pafs.LocalFileSystem()
MiB = 1024 * 1024


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_data_files_skips_hidden_files_and_directories(tmp_path: Path) -> None:
    for name in ("part-1", "_SUCCESS", ".part-1.crc", "part-0"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    assert [f.name for f in data_files(LOCAL, str(tmp_path))] == ["part-0", "part-1"]
    with pytest.raises(CompactionError, match="not found"):
        data_files(LOCAL, str(tmp_path / "missing"))


def _small_parquet_partition(directory: Path, files: int = 12, rows: int = 20) -> None:
    directory.mkdir(parents=True)
    table = pa.table(
        {
            "id": pa.array(range(files * rows), pa.int64()),
            "name": [None if i % 5 == 0 else f"n{i}" for i in range(files * rows)],
        }
    )
    for number in range(files):
        pq.write_table(
            table.slice(number * rows, rows),
            str(directory / f"part-{number:05d}.snappy.parquet"),
            compression="snappy",
        )
    (directory / "_SUCCESS").write_bytes(b"")


def test_corrupted_rewrite_keeps_originals(tmp_path: Path) -> None:
    directory = tmp_path / "datestamp=20110228"
    _small_parquet_partition(directory)
    before = _listing(directory)

    def corrupt(fs: pafs.FileSystem, path: str) -> None:
        table = pq.read_table(path, filesystem=fs)
        changed = table.set_column(0, "id", pa.array([-1, *table["id"].to_pylist()[1:]]))
        pq.write_table(changed, path, filesystem=fs)

    policy = CompactionPolicy(min_files=10)
    with damaged_merges(corrupt), pytest.raises(VerificationError) as info:
        merge_partition(LOCAL, str(directory), storage_format="parquet", policy=policy)
    assert str(directory) in str(info.value)
    assert "originals kept" in str(info.value)
    assert _listing(directory) == before  # originals intact, temp files gone, no manifest
    assert not any(p.name.startswith(".") for p in directory.iterdir())


def test_dropped_row_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _small_parquet_partition(directory)
    before = _listing(directory)

    def drop_row(fs: pafs.FileSystem, path: str) -> None:
        table = pq.read_table(path, filesystem=fs)
        pq.write_table(table.slice(1), path, filesystem=fs)

    with damaged_merges(drop_row), pytest.raises(VerificationError, match="rows"):
        merge_partition(
            LOCAL,
            str(directory),
            storage_format="parquet",
            policy=CompactionPolicy(),
        )
    assert _listing(directory) == before


def test_merge_respects_target_size_and_writes_manifest(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _small_parquet_partition(directory, files=12)
    big = pa.table({"id": pa.array(range(10_000, 15_000), pa.int64()), "name": ["big"] * 5000})
    pq.write_table(big, str(directory / "part-big.parquet"))
    sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
    big_size = sizes["part-big.parquet"]
    small_size = max(s for n, s in sizes.items() if n.startswith("part-0"))
    assert small_size < big_size
    policy = CompactionPolicy(
        min_files=10, small_file_bytes=big_size, target_file_bytes=small_size * 4
    )
    originals = data_files(LOCAL, str(directory))
    small = policy.small_files(originals)
    assert policy.triggers(originals)
    rows_before, checksum_before = compute_checksum(LOCAL, [f.path for f in small], "parquet")

    result = merge_partition(LOCAL, str(directory), storage_format="parquet", policy=policy)

    assert result.changed
    assert result.files_before == len(originals)
    assert len(result.new_files) == 3
    assert result.rows == rows_before == 240
    assert result.checksum == checksum_before
    names = sorted(p.name for p in directory.iterdir())
    assert "part-big.parquet" in names  # not small: untouched
    assert "_SUCCESS" in names
    assert not any(n.startswith(".") for n in names)
    new_paths = [str(directory / n) for n in result.new_files]
    assert all(n.endswith(".snappy.parquet") for n in result.new_files)
    assert compute_checksum(LOCAL, new_paths, "parquet") == (rows_before, checksum_before)

    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    assert result.manifest_path == str(directory / MANIFEST_NAME)
    entry = manifest["compactions"][-1]
    assert entry["mode"] == "merge"
    assert {o["name"] for o in entry["originals"]} == {f.name for f in small}
    assert all(o["rows"] == 20 for o in entry["originals"])
    assert {o["name"]: o["size"] for o in entry["originals"]} == {f.name: f.size for f in small}
    assert [o["name"] for o in entry["outputs"]] == list(result.new_files)
    assert sum(o["rows"] for o in entry["outputs"]) == 240
    assert entry["untouched"] == ["part-big.parquet"]
    assert pq.read_table(str(directory / "part-big.parquet")).num_rows == 5000
    assert entry["checksum"] == f"{checksum_before:016x}"


def test_partition_under_the_trigger_is_left_alone(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _small_parquet_partition(directory, files=5)
    before = _listing(directory)
    policy = CompactionPolicy(min_files=10)
    assert not policy.triggers(data_files(LOCAL, str(directory)))
    # merge_partition itself does nothing with fewer than two small files
    single = tmp_path / "single"
    _small_parquet_partition(single, files=1)
    single_before = _listing(single)
    result = merge_partition(LOCAL, str(single), storage_format="parquet", policy=policy)
    assert not result.changed
    assert result.files_after == result.files_before == 1
    assert _listing(single) == single_before
    assert _listing(directory) == before


def test_merge_rejects_mixed_schemas_and_bad_arguments(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _small_parquet_partition(directory, files=3)
    pq.write_table(pa.table({"other": [1]}), str(directory / "part-zzz.parquet"))
    before = _listing(directory)
    with pytest.raises(CompactionError, match=str(directory)):
        merge_partition(
            LOCAL, str(directory), storage_format="parquet", policy=CompactionPolicy(min_files=2)
        )
    assert _listing(directory) == before
    with pytest.raises(CompactionError, match="storage_format"):
        merge_partition(LOCAL, str(directory), storage_format="csv", policy=CompactionPolicy())
    with pytest.raises(CompactionError, match="not 'merge'"):
        merge_partition(
            LOCAL, str(directory), storage_format="parquet", policy=CompactionPolicy(mode="har")
        )


# --------------------------------------------------------------------------- merge (Spark)


SPARK_COLUMNS = [
    "id",
    "cast(id as int) % 7 as small",
    "cast(id * 1.25 as decimal(12, 2)) as dec",
    "cast(id * 1000 as decimal(30, 4)) as wide_dec",
    "timestamp_seconds(id * 3607) as ts",
    "date_add(date'2011-02-28', cast(id as int)) as day",
    "case when id % 3 = 0 then null else concat('s', id, 'ü') end as s",
    "case when id % 5 = 0 then null else array(id, id + 1, null) end as arr",
    "case when id % 4 = 0 then double('NaN') else id / 7.0d end as dbl",
    "named_struct('a', id % 2 = 0, 'b', map('k', id)) as st",
]


def _spark_rows(spark: Any, path: str, fmt: str) -> Counter[str]:
    rows = spark.read.format(fmt).load(path).collect()
    return Counter(repr(r) for r in rows)


def _check_spark_merge(spark: Any, directory: Path, fmt: str) -> tuple[Any, Any]:
    df = spark.range(0, 600, 1, 2).selectExpr(*SPARK_COLUMNS)
    df.repartition(30).write.format(fmt).save(str(directory))
    originals = data_files(LOCAL, str(directory))
    assert len(originals) == 30
    before = _spark_rows(spark, str(directory), fmt)
    schema_before = spark.read.format(fmt).load(str(directory)).schema
    policy = CompactionPolicy()
    assert policy.triggers(originals)

    result = merge_partition(LOCAL, str(directory), storage_format=fmt, policy=policy)

    assert result.files_before == 30
    assert result.files_after == len(result.new_files) == 1
    assert result.rows == 600
    after_files = data_files(LOCAL, str(directory))
    assert [f.name for f in after_files] == list(result.new_files)
    spark.catalog.clearCache()
    after = _spark_rows(spark, str(directory), fmt)
    assert after == before
    assert sum(after.values()) == 600
    assert spark.read.format(fmt).load(str(directory)).schema == schema_before
    return originals, after_files


@pytest.mark.spark
def test_merge_parquet_written_by_spark(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / "parquet" / "datestamp=20110228"
    # read one original's footer before the merge deletes it
    df = spark.range(0, 600, 1, 2).selectExpr(*SPARK_COLUMNS)
    probe = tmp_path / "probe"
    df.repartition(2).write.parquet(str(probe))
    probe_file = data_files(LOCAL, str(probe))[0].path
    original = pq.ParquetFile(probe_file, coerce_int96_timestamp_unit="us")

    _, after_files = _check_spark_merge(spark, directory, "parquet")

    merged = pq.ParquetFile(after_files[0].path, coerce_int96_timestamp_unit="us")
    assert merged.schema_arrow.equals(original.schema_arrow, check_metadata=True)
    assert SPARK_ROW_METADATA.encode() in merged.schema_arrow.metadata
    assert merged.metadata.metadata == original.metadata.metadata  # every footer key
    physical = [
        (merged.schema.column(i).path, merged.schema.column(i).physical_type)
        for i in range(len(merged.schema))
    ]
    assert physical == [
        (original.schema.column(i).path, original.schema.column(i).physical_type)
        for i in range(len(original.schema))
    ]
    codecs = {
        merged.metadata.row_group(0).column(i).compression
        for i in range(merged.metadata.num_columns)
    }
    assert codecs == {original.metadata.row_group(0).column(0).compression} == {"SNAPPY"}


@pytest.mark.spark
def test_merge_orc_written_by_spark(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / "orc" / "datestamp=20110228"
    originals_probe = tmp_path / "probe"
    spark.range(0, 10, 1, 1).selectExpr(*SPARK_COLUMNS).write.orc(str(originals_probe))
    original = orc.ORCFile(data_files(LOCAL, str(originals_probe))[0].path)

    _, after_files = _check_spark_merge(spark, directory, "orc")

    merged = orc.ORCFile(after_files[0].path)
    assert merged.schema.equals(original.schema)
    assert merged.compression == original.compression  # Spark 4 writes ZSTD by default
    codec = str(original.compression).lower()
    assert os.path.basename(after_files[0].path).endswith(f".{codec}.orc")
    assert merged.compression_size == original.compression_size


# --------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class _Staged:
    spec: str
    directory: str
    files: list[Any]


def test_compact_partition_dispatch(tmp_path: Path) -> None:
    few = tmp_path / "few"
    _small_parquet_partition(few, files=3)
    assert (
        compact_partition(LOCAL, str(few), policy=CompactionPolicy(), storage_format="parquet")
        is None
    )
    forced = compact_partition(
        LOCAL, str(few), policy=CompactionPolicy(), storage_format="parquet", force=True
    )
    assert forced is not None
    assert forced.files_after == 1

    with pytest.raises(CompactionError, match="use mode='har'"):
        compact_partition(
            LOCAL, str(few), policy=CompactionPolicy(min_files=2), storage_format="csv", force=True
        )
    har = compact_partition(
        LOCAL,
        str(few),
        policy=CompactionPolicy(mode="har", min_files=2),
        storage_format="parquet",
        force=True,
    )
    assert har is not None
    assert har.new_location is not None
    assert har.new_location.startswith("har://file-localhost/")
    assert har.rows == 60


def test_compact_staged_hook(tmp_path: Path) -> None:
    directory = tmp_path / "staged"
    _small_parquet_partition(directory, files=12)
    staged = _Staged(spec="datestamp=1", directory=str(directory), files=[])
    policy = CompactionPolicy()
    compacted = compact_staged(LOCAL, staged, policy=policy, storage_format="parquet")
    assert compacted.spec == "datestamp=1"
    assert len(compacted.files) == 1
    assert compacted.files[0].path.endswith(".snappy.parquet")
    # a second run does not trigger: unchanged object
    assert compact_staged(LOCAL, compacted, policy=policy, storage_format="parquet") is compacted
