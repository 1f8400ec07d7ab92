"""Merge a partition's small Parquet or ORC files into few large ones, verified.

The rewrite keeps what Spark wrote (schema, footer metadata, codec, INT96 timestamps,
integer-backed decimals, the columns it dictionary-encoded), checks the rows with
:func:`~spark_output.compaction.checksum.compute_checksum` before the originals go, and
switches by renaming: atomic for a staged (unpublished) directory, which is where the
committer runs it. Maintenance merges a copy and switches the registered location
instead (:mod:`spark_output.maintenance.table_compaction`).
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq

from spark_output.compaction.checksum import (
    MASK,
    DictionaryCache,
    batch_checksum,
    compute_checksum,
)
from spark_output.compaction.manifest import write_manifest
from spark_output.compaction.read import check_format, dense, prefetched, read_batches
from spark_output.compaction.result import PartitionCompaction
from spark_output.errors import CompactionError, VerificationError
from spark_output.fs import FileStat, delete_data_file, delete_files_quietly, list_data_files

if TYPE_CHECKING:
    from spark_output.compaction.policy import CompactionPolicy

__all__ = ["SPARK_ROW_METADATA", "merge_partition", "plan_groups"]

SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"
"""Parquet footer key under which Spark stores its schema (kept by the merge)."""

_FLUSH_BYTES = 64 * 1024 * 1024
_TEMP_PREFIX = ".hcat-compact-"


@dataclass(frozen=True)
class _ParquetOptions:
    schema: pa.Schema
    compression: str
    int96: bool
    decimal_as_integer: bool
    footer_metadata: dict[bytes, bytes]
    use_dictionary: bool | tuple[str, ...] = True


_PARQUET_CODECS = {
    "SNAPPY": "snappy",
    "GZIP": "gzip",
    "ZSTD": "zstd",
    "LZ4": "lz4",
    "LZ4_RAW": "lz4",
    "BROTLI": "brotli",
    "UNCOMPRESSED": "none",
}
_FIXED_WIDTH = {"INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8, "INT96": 12}
_ORC_CODECS = {
    "SNAPPY": "snappy",
    "ZLIB": "zlib",
    "ZSTD": "zstd",
    "LZ4": "lz4",
    "UNCOMPRESSED": "uncompressed",
}


def _parquet_options(fs: pafs.FileSystem, path: str, directory: str) -> _ParquetOptions:
    with fs.open_input_file(path) as source:
        pf = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        schema = pf.schema_arrow
        meta = pf.metadata
        physical = {pf.schema.column(i).physical_type for i in range(len(pf.schema))}
        decimal_integer = any(
            pf.schema.column(i).physical_type in ("INT32", "INT64")
            and pf.schema.column(i).logical_type.type == "DECIMAL"
            for i in range(len(pf.schema))
        )
        int64_timestamps = any(
            pf.schema.column(i).physical_type == "INT64"
            and pf.schema.column(i).logical_type.type == "TIMESTAMP"
            for i in range(len(pf.schema))
        )
        codec = meta.row_group(0).column(0).compression if meta.num_row_groups else "SNAPPY"
        footer = meta.metadata
        use_dictionary = _dictionary_choice(meta)
    if "INT96" in physical and int64_timestamps:
        raise CompactionError(
            f"cannot merge {path} in partition {directory}: it mixes INT96 and INT64 "
            "timestamps, which pyarrow cannot write back as they are"
        )
    if codec not in _PARQUET_CODECS:
        raise CompactionError(f"unsupported Parquet codec {codec} in {path} ({directory})")
    return _ParquetOptions(
        schema=schema,
        compression=_PARQUET_CODECS[codec],
        int96="INT96" in physical,
        decimal_as_integer=decimal_integer,
        footer_metadata=dict(footer or {}),
        use_dictionary=use_dictionary,
    )


def _dictionary_choice(meta: pq.FileMetaData) -> bool | tuple[str, ...]:
    """Which columns the merged file dictionary-encodes: those the original writer did
    (the first row group has a dictionary page), except fixed-width columns where the
    dictionary did not pay (the encoded chunk is at least 3/4 of the plain values' size,
    as for unique ids). Dictionary-encoding such columns again only costs time, because
    the writer falls back to plain encoding once the merged dictionary grows."""
    if meta.num_row_groups == 0:
        return True
    group = meta.row_group(0)
    enabled = []
    for index in range(group.num_columns):
        chunk = group.column(index)
        if not chunk.has_dictionary_page:
            continue
        width = _FIXED_WIDTH.get(chunk.physical_type)
        if width is None and chunk.physical_type == "FIXED_LEN_BYTE_ARRAY":
            width = meta.schema.column(index).length
        if (
            width
            and chunk.num_values
            and chunk.total_uncompressed_size * 4 >= 3 * (width * chunk.num_values)
        ):
            continue
        enabled.append(chunk.path_in_schema)
    if len(enabled) == group.num_columns:
        return True
    return tuple(enabled) if enabled else False


@dataclass(frozen=True)
class _OrcOptions:
    schema: pa.Schema
    compression: str
    compression_block_size: int
    file_version: str


def _orc_options(fs: pafs.FileSystem, path: str, directory: str) -> _OrcOptions:
    with fs.open_input_file(path) as source:
        of = orc.ORCFile(source)
        codec = str(of.compression).upper()
        if codec not in _ORC_CODECS:
            raise CompactionError(f"unsupported ORC codec {codec} in {path} ({directory})")
        return _OrcOptions(
            schema=of.schema,
            compression=_ORC_CODECS[codec],
            compression_block_size=int(of.compression_size),
            file_version=str(of.file_version),
        )


class _Writer:
    """Writes one merged file (Parquet or ORC), buffering batches into large row groups."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        path: str,
        options: _ParquetOptions | _OrcOptions,
    ) -> None:
        self._sink = fs.open_output_stream(path, compression=None)
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self.rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._orc: orc.ORCWriter | None = None
        self._footer: dict[bytes, bytes] = {}
        self._schema = options.schema
        if isinstance(options, _ParquetOptions):
            self._footer = options.footer_metadata
            self._parquet = pq.ParquetWriter(
                self._sink,
                options.schema,
                compression=options.compression,
                use_deprecated_int96_timestamps=options.int96,
                use_dictionary=(
                    options.use_dictionary
                    if isinstance(options.use_dictionary, bool)
                    else list(options.use_dictionary)
                ),
                store_decimal_as_integer=options.decimal_as_integer,
                store_schema=False,
                write_statistics=True,
            )
        else:
            self._orc = orc.ORCWriter(
                self._sink,
                file_version=options.file_version,
                compression=options.compression,
                compression_block_size=options.compression_block_size,
            )

    def write(self, batch: pa.RecordBatch) -> None:
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._pending_bytes >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        self._pending = []
        self._pending_bytes = 0
        if self._parquet is not None:
            self._parquet.write_table(table, row_group_size=max(table.num_rows, 1))
        elif self._orc is not None:
            self._orc.write(table)

    def close(self) -> None:
        try:
            self._flush()
            if self._parquet is not None:
                if self._footer:
                    self._parquet.add_key_value_metadata(self._footer)
                self._parquet.close()
            if self._orc is not None:
                self._orc.close()
        finally:
            self._sink.close()


def plan_groups(files: Sequence[FileStat], target: int) -> list[list[FileStat]]:
    """Consecutive groups whose input sizes add up to at most ``target`` (one file may
    exceed it alone)."""
    groups: list[list[FileStat]] = []
    size = 0
    for stat in files:
        if groups and size + stat.size <= target:
            groups[-1].append(stat)
            size += stat.size
        else:
            groups.append([stat])
            size = stat.size
    return groups


def _codec_suffix(codec: str) -> str:
    return "" if codec in ("none", "uncompressed") else f".{codec}"


def merge_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    storage_format: str,
    policy: CompactionPolicy,
    verify: bool = True,
    _corrupt_hook: Callable[[pafs.FileSystem, str], None] | None = None,
) -> PartitionCompaction:
    """Merge the small data files of one Parquet or ORC partition directory.

    The files smaller than ``policy.small_file_bytes`` (hidden files excluded; larger
    files are left alone) are rewritten, in name order, into as few files as
    ``policy.target_file_bytes`` allows. Fewer than two small files: nothing is done
    (``result.changed`` is False). The caller decides with ``policy.triggers`` whether
    to call at all.

    Parquet: the Arrow schema and every footer key (Spark's
    ``org.apache.spark.sql.parquet.row.metadata``, ``org.apache.spark.version``, ...)
    are kept, as are the codec, INT96 timestamps and integer-backed decimals. ORC: the
    schema, codec, compression block size and file version are kept (pyarrow's ORC
    writer cannot copy user metadata). All small files must have the same schema.

    New files are written under hidden temporary names in the directory. With
    ``verify`` their row count and :func:`compute_checksum` must equal the originals'
    (computed from the same read that feeds the rewrite); otherwise the new files are
    deleted, the originals kept and :class:`VerificationError` names the directory. Then
    the manifest ``_hcat_compaction.json`` is written, the new files are renamed to
    Spark-style visible names (``part-00000-<uuid>-c000.snappy.parquet``) and the
    originals deleted. ``_corrupt_hook`` (tests only) is called with ``(fs, path)`` for
    each temporary file before verification.
    """
    fmt = check_format(storage_format)
    if policy.mode != "merge":
        raise CompactionError(f"policy mode is {policy.mode!r}, not 'merge' ({directory})")
    started = time.monotonic()
    directory = directory.rstrip("/")
    files = list_data_files(fs, directory)
    small = policy.small_files(files)
    if len(small) < 2:
        total = sum(f.size for f in files)
        return PartitionCompaction(
            directory=directory,
            mode="merge",
            files_before=len(files),
            files_after=len(files),
            bytes_before=total,
            bytes_after=total,
            rows=None,
            checksum=None,
            seconds=time.monotonic() - started,
        )

    options: _ParquetOptions | _OrcOptions
    try:
        if fmt == "parquet":
            options = _parquet_options(fs, small[0].path, directory)
        else:
            options = _orc_options(fs, small[0].path, directory)
    except (OSError, pa.ArrowException) as exc:
        raise CompactionError(
            f"cannot read {small[0].path} in partition {directory}: {exc}"
        ) from exc
    expected_schema = options.schema

    token = uuid.uuid4().hex
    temp_paths: list[str] = []
    temp_rows: list[int] = []
    per_file_rows: dict[str, int] = {}
    rows_before = 0
    checksum_before = 0
    try:
        with contextlib.closing(prefetched(fs, small)) as originals:
            for number, group in enumerate(plan_groups(small, policy.target_file_bytes)):
                temp = posixpath.join(directory, f"{_TEMP_PREFIX}{token}-{number:05d}.tmp")
                temp_paths.append(temp)
                writer = _Writer(fs, temp, options)
                try:
                    for _ in group:
                        stat, data = next(originals)
                        file_rows = 0
                        dictionaries: DictionaryCache = {}
                        for batch in read_batches(fs, stat.path, fmt, data):
                            if verify:
                                checksum_before = (
                                    checksum_before + batch_checksum(batch, dictionaries)
                                ) & MASK
                            batch = dense(batch, expected_schema)
                            if not batch.schema.equals(expected_schema, check_metadata=False):
                                raise CompactionError(
                                    f"cannot merge partition {directory}: {stat.name} has "
                                    f"schema {batch.schema} but {small[0].name} has "
                                    f"{expected_schema}"
                                )
                            file_rows += batch.num_rows
                            writer.write(batch)
                        per_file_rows[stat.name] = file_rows
                        rows_before += file_rows
                finally:
                    writer.close()
                temp_rows.append(writer.rows)
        if _corrupt_hook is not None:
            for temp in temp_paths:
                _corrupt_hook(fs, temp)
        if verify:
            rows_after, checksum_after = compute_checksum(fs, temp_paths, fmt)
            if (rows_after, checksum_after) != (rows_before, checksum_before):
                raise VerificationError(
                    f"merge of partition {directory} failed verification: originals hold "
                    f"{rows_before} rows (checksum {checksum_before:016x}), rewritten files "
                    f"{rows_after} rows (checksum {checksum_after:016x}); originals kept"
                )
    except CompactionError:
        delete_files_quietly(fs, temp_paths)
        raise
    except (OSError, pa.ArrowException) as exc:
        delete_files_quietly(fs, temp_paths)
        raise CompactionError(f"merge of partition {directory} failed: {exc}") from exc
    except BaseException:
        delete_files_quietly(fs, temp_paths)
        raise

    codec = options.compression
    extension = "parquet" if fmt == "parquet" else "orc"
    final_names = [
        f"part-{number:05d}-{token}-c000{_codec_suffix(codec)}.{extension}"
        for number in range(len(temp_paths))
    ]
    sizes = [int(fs.get_file_info(p).size or 0) for p in temp_paths]
    outputs = [
        {"name": name, "size": size, "rows": rows}
        for name, size, rows in zip(final_names, sizes, temp_rows, strict=True)
    ]
    manifest = write_manifest(
        fs,
        directory,
        {
            "mode": "merge",
            "storage_format": fmt,
            "codec": codec,
            "rows": rows_before,
            "checksum": f"{checksum_before:016x}" if verify else None,
            "verified": verify,
            "originals": [
                {"name": s.name, "size": s.size, "rows": per_file_rows[s.name]} for s in small
            ],
            "outputs": outputs,
            "untouched": [f.name for f in files if f not in small],
        },
    )
    for name, temp in zip(final_names, temp_paths, strict=True):
        fs.move(temp, posixpath.join(directory, name))
    for stat in small:
        delete_data_file(fs, stat.path)
    untouched = [f for f in files if f not in small]
    return PartitionCompaction(
        directory=directory,
        mode="merge",
        files_before=len(files),
        files_after=len(untouched) + len(final_names),
        bytes_before=sum(f.size for f in files),
        bytes_after=sum(f.size for f in untouched) + sum(sizes),
        rows=rows_before,
        checksum=checksum_before if verify else None,
        seconds=time.monotonic() - started,
        manifest_path=manifest,
        new_files=tuple(final_names),
    )
