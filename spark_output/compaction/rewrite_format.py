"""Writing merged Parquet/ORC files the way the originals were written.

:func:`write_options` reads what a merged file must keep from one original (schema,
footer metadata, codec, INT96 timestamps, integer-backed decimals, the columns the
original writer dictionary-encoded; for ORC the codec, block size and file version), and
:class:`MergedFileWriter` writes one merged file with them, in large row groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq

from spark_output.compaction.read import StorageFormat
from spark_output.errors import CompactionError
from spark_output.fs import open_data_file

__all__ = ["MergedFileWriter", "OrcOptions", "ParquetOptions", "WriteOptions", "write_options"]

_FLUSH_BYTES = 64 * 1024 * 1024

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


@dataclass(frozen=True)
class ParquetOptions:
    """What a merged Parquet file keeps of the originals."""

    schema: pa.Schema
    compression: str
    int96: bool
    decimal_as_integer: bool
    footer_metadata: dict[bytes, bytes]
    use_dictionary: bool | tuple[str, ...] = True


@dataclass(frozen=True)
class OrcOptions:
    """What a merged ORC file keeps of the originals."""

    schema: pa.Schema
    compression: str
    compression_block_size: int
    file_version: str


WriteOptions = ParquetOptions | OrcOptions


def write_options(
    fs: pafs.FileSystem, path: str, fmt: StorageFormat, directory: str
) -> WriteOptions:
    """The options of merged files, read from the original at ``path``.

    Raises:
        CompactionError: the file cannot be read, or its codec or timestamps cannot be
            written back as they are.
    """
    try:
        if fmt == "parquet":
            return _parquet_options(fs, path, directory)
        return _orc_options(fs, path, directory)
    except (OSError, pa.ArrowException) as exc:
        raise CompactionError(f"cannot read {path} in partition {directory}: {exc}") from exc


def _parquet_options(fs: pafs.FileSystem, path: str, directory: str) -> ParquetOptions:
    with open_data_file(fs, path) as source:
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
    return ParquetOptions(
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


def _orc_options(fs: pafs.FileSystem, path: str, directory: str) -> OrcOptions:
    with open_data_file(fs, path) as source:
        of = orc.ORCFile(source)
        codec = str(of.compression).upper()
        if codec not in _ORC_CODECS:
            raise CompactionError(f"unsupported ORC codec {codec} in {path} ({directory})")
        return OrcOptions(
            schema=of.schema,
            compression=_ORC_CODECS[codec],
            compression_block_size=int(of.compression_size),
            file_version=str(of.file_version),
        )


class MergedFileWriter:
    """Writes one merged file (Parquet or ORC), buffering batches into large row groups."""

    def __init__(self, fs: pafs.FileSystem, path: str, options: WriteOptions) -> None:
        self._sink = fs.open_output_stream(path, compression=None)
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self.rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._orc: orc.ORCWriter | None = None
        self._footer: dict[bytes, bytes] = {}
        self._schema = options.schema
        if isinstance(options, ParquetOptions):
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
