"""Reading Parquet and ORC data files in batches, for the checksum and the merge."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq

from spark_output.errors import CompactionError
from spark_output.fs import FileStat, open_data_file

__all__ = [
    "BATCH_ROWS",
    "StorageFormat",
    "check_format",
    "dense",
    "parquet_or_orc_rows",
    "prefetched",
    "read_batches",
]

StorageFormat = Literal["parquet", "orc"]

BATCH_ROWS = 64 * 1024
"""Rows per batch read: large enough for vectorized kernels, small enough for memory."""


def _dictionary_columns(pf: pq.ParquetFile) -> list[str]:
    """Top-level string/binary columns whose first row group is dictionary-encoded.

    Reading them as Arrow dictionary arrays is cheaper, and the checksum then hashes each
    distinct value once instead of once per row."""
    meta = pf.metadata
    if meta.num_row_groups == 0:
        return []
    group = meta.row_group(0)
    encoded = {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).has_dictionary_page
    }
    return [
        field.name
        for field in pf.schema_arrow
        if field.name in encoded
        and (
            pa.types.is_string(field.type)
            or pa.types.is_binary(field.type)
            or pa.types.is_large_string(field.type)
            or pa.types.is_large_binary(field.type)
        )
    ]


def dense(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the dictionary-encoded columns that ``schema`` has plain decoded."""
    schema_out = batch.schema
    columns = batch.columns
    changed = False
    for index, field in enumerate(batch.schema):
        wanted = schema.field(index).type if index < len(schema) else None
        if pa.types.is_dictionary(field.type) and (
            wanted is None or not pa.types.is_dictionary(wanted)
        ):
            column = columns[index].dictionary_decode()
            columns[index] = column
            schema_out = schema_out.set(index, field.with_type(column.type))
            changed = True
    return pa.RecordBatch.from_arrays(columns, schema=schema_out) if changed else batch


def read_batches(
    fs: pafs.FileSystem, path: str, storage_format: StorageFormat, data: pa.Buffer | None = None
) -> Iterator[pa.RecordBatch]:
    """The file's rows in batches, from ``data`` (its bytes, already read) if given.
    Parquet columns chosen by :func:`_dictionary_columns` come as dictionary arrays
    (:func:`_dense` turns them back)."""
    opened = open_data_file(fs, path) if data is None else pa.BufferReader(data)
    with opened as source:
        if storage_format == "parquet":
            pf = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            dictionary = _dictionary_columns(pf)
            if dictionary:
                pf = pq.ParquetFile(
                    source,
                    metadata=pf.metadata,
                    coerce_int96_timestamp_unit="us",
                    read_dictionary=dictionary,
                )
            yield from pf.iter_batches(batch_size=BATCH_ROWS, use_threads=False)
        else:
            of = orc.ORCFile(source)
            for stripe in range(of.nstripes):
                yield from pa.Table.from_batches([of.read_stripe(stripe)]).to_batches(
                    max_chunksize=BATCH_ROWS
                )


def _read_file(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    with open_data_file(fs, path) as source:
        data: pa.Buffer = source.read_buffer()
    return data


def prefetched(
    fs: pafs.FileSystem, files: Sequence[FileStat]
) -> Generator[tuple[FileStat, pa.Buffer], None, None]:
    """Each (small) file with its bytes, the next one read in a background thread while
    the caller decodes the current one: disk or network reads overlap the CPU work."""
    if not files:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hcat-prefetch") as pool:
        pending = pool.submit(_read_file, fs, files[0].path)
        for index, stat in enumerate(files):
            data = pending.result()
            if index + 1 < len(files):
                pending = pool.submit(_read_file, fs, files[index + 1].path)
            yield stat, data


def check_format(storage_format: str) -> StorageFormat:
    if storage_format == "parquet":
        return "parquet"
    if storage_format == "orc":
        return "orc"
    raise CompactionError(f"storage_format must be 'parquet' or 'orc', got {storage_format!r}")


def parquet_or_orc_rows(fs: pafs.FileSystem, path: str, storage_format: str | None) -> int | None:
    """Row count from a Parquet or ORC file's footer; None for other formats."""
    if storage_format not in ("parquet", "orc"):
        return None
    with open_data_file(fs, path) as source:
        if storage_format == "parquet":
            return int(pq.ParquetFile(source).metadata.num_rows)
        return int(orc.ORCFile(source).nrows)
