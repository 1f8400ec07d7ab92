"""Small-file compaction of one partition directory: policy, format-aware merge, checksums.

Building blocks the output committer calls on a staged partition directory before
publication, and that maintenance calls on existing partitions. Everything works through
:mod:`pyarrow.fs`, so a directory may be local, on HDFS or on S3.

* :class:`CompactionPolicy` decides whether a partition is worth compacting
  (:meth:`CompactionPolicy.triggers`) and how.
* :func:`merge_partition` rewrites a partition's small Parquet or ORC files into as few
  files as the target size allows, preserving schema, Spark's metadata and the codec,
  verifies the rows, and only then replaces the originals.
* :func:`compute_checksum` gives the row count and an order-independent content checksum
  of a set of files; the merge and the tests compare them before and after.
* The HAR mode lives in :mod:`spark_output.har` (:func:`spark_output.har.archive_partition`).

Every compacted partition gets an audit manifest ``_hcat_compaction.json`` (hidden from
Spark and Hive by its leading underscore) listing the original files (name, size, rows)
and the new ones; it is written *before* the originals are deleted, so an interrupted
switch can be finished by hand: when every listed output exists under its final name,
delete the listed originals that are still there.

Switching is a rename of the new files followed by deletion of the originals: it is
atomic for a staged (unpublished) directory, which is where the committer runs it.
For a partition that readers may be listing at the same time, compact a copy and switch
the partition's registered location instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import posixpath
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq

from spark_output.errors import SparkOutputError

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "MANIFEST_NAME",
    "CompactionError",
    "CompactionMode",
    "CompactionPolicy",
    "FileStat",
    "IntegrityError",
    "PartitionCompaction",
    "StorageFormat",
    "compact_partition",
    "compute_checksum",
    "data_files",
    "delete_data_file",
    "merge_partition",
    "parquet_or_orc_rows",
    "write_manifest",
]

CompactionMode = Literal["merge", "har"]
StorageFormat = Literal["parquet", "orc"]

DEFAULT_BLOCK_BYTES = 128 * 1024 * 1024
"""One HDFS block (128 MiB): the default small-file threshold and merge target."""

MANIFEST_NAME = "_hcat_compaction.json"
"""Audit manifest written into every compacted partition directory."""

SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"
"""Parquet footer key under which Spark stores its schema (kept by the merge)."""

_BATCH_ROWS = 64 * 1024
_FLUSH_BYTES = 64 * 1024 * 1024
_TEMP_PREFIX = ".hcat-compact-"


class CompactionError(SparkOutputError):
    """A partition could not be compacted; the message names the partition directory."""


class IntegrityError(CompactionError):
    """Rewritten files do not hold the same rows as the originals (originals kept)."""


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class FileStat:
    """A data file in a partition directory: ``name`` inside it, full ``path``, ``size``."""

    name: str
    path: str
    size: int


class HasSize(Protocol):
    """Anything with a ``size`` in bytes (our :class:`FileStat`, the committer's)."""

    @property
    def size(self) -> int: ...


class _StagedLike(Protocol):
    """The committer's staged partition, as :meth:`CompactionPolicy.compact_staged` uses it."""

    @property
    def directory(self) -> str: ...


_F = TypeVar("_F", bound=HasSize)
_S = TypeVar("_S", bound=_StagedLike)


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how to compact a partition.

    A partition *triggers* when it holds at least ``min_files`` data files each smaller
    than ``small_file_bytes`` — HCatalog's rule, "enough files under one block". Files at
    or above ``small_file_bytes`` neither count towards the trigger nor prevent it, and
    the merge leaves them as they are (rewriting them would cost I/O and gain nothing);
    the HAR mode archives them with the rest, because the partition's location moves
    into the archive. ``target_file_bytes`` bounds the merged files (by the size of the
    inputs that go into each). ``mode`` picks :func:`merge_partition` (Parquet/ORC) or
    :func:`spark_output.har.archive_partition` (any format).
    """

    min_files: int = 10
    small_file_bytes: int = DEFAULT_BLOCK_BYTES
    target_file_bytes: int = DEFAULT_BLOCK_BYTES
    mode: CompactionMode = "merge"

    def __post_init__(self) -> None:
        for name in ("min_files", "small_file_bytes", "target_file_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CompactionError(f"CompactionPolicy.{name} must be an int, got {value!r}")
        if self.min_files < 2:
            raise CompactionError(
                f"CompactionPolicy.min_files must be at least 2, got {self.min_files}"
            )
        if self.small_file_bytes <= 0:
            raise CompactionError(
                f"CompactionPolicy.small_file_bytes must be positive, got {self.small_file_bytes}"
            )
        if self.target_file_bytes <= 0:
            raise CompactionError(
                f"CompactionPolicy.target_file_bytes must be positive, got {self.target_file_bytes}"
            )
        if self.mode not in ("merge", "har"):
            raise CompactionError(
                f"CompactionPolicy.mode must be 'merge' or 'har', got {self.mode!r}"
            )

    def small_files(self, files: Sequence[_F]) -> list[_F]:
        """The files smaller than ``small_file_bytes``, in the given order."""
        return [f for f in files if f.size < self.small_file_bytes]

    def triggers(self, files: Sequence[HasSize]) -> bool:
        """Whether a partition holding ``files`` should be compacted (see the class doc).

        ``files`` are the partition's data files (hidden files excluded), as
        :func:`data_files` lists them; anything with a ``size`` will do."""
        return len(self.small_files(files)) >= self.min_files

    def compact_staged(self, fs: pafs.FileSystem, staged: _S, *, storage_format: str) -> _S:
        """Committer hook: compact one staged partition if it triggers.

        ``staged`` is the committer's staged-partition dataclass (it needs ``directory``
        and ``files`` fields). Returns it unchanged when the policy does not trigger,
        else a copy whose ``files`` are the directory's data files after compaction, as
        :func:`spark_output.fs.list_data_files` lists them (none after a HAR; the
        archive is ``<directory>/_hcat_archive.har`` and the partition's location, once
        the directory is in its final place, is
        :func:`spark_output.har.har_location` of its URI).
        """
        result = compact_partition(fs, staged.directory, policy=self, storage_format=storage_format)
        if result is None or not result.changed:
            return staged
        from spark_output.fs import list_data_files

        files = list_data_files(fs, staged.directory)
        return cast(_S, dataclasses.replace(cast(Any, staged), files=files))


@dataclass(frozen=True)
class PartitionCompaction:
    """What compacting one partition did.

    ``files_*``/``bytes_*`` count data files (for HAR, "after" counts the part files);
    ``rows``/``checksum`` are those verified (None when not computed). ``new_location``
    is set when the partition's location changes (HAR: the ``har://`` URI).
    ``new_files`` are the names of the files written into the directory (for HAR, the
    part files inside the archive).
    """

    directory: str
    mode: CompactionMode
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    rows: int | None
    checksum: int | None
    seconds: float
    new_location: str | None = None
    manifest_path: str | None = None
    new_files: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """False when there was nothing to compact and the directory was left alone."""
        return self.manifest_path is not None


# --------------------------------------------------------------------------- listing


def _is_hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def data_files(fs: pafs.FileSystem, directory: str) -> list[FileStat]:
    """The partition's data files: regular files directly in ``directory`` whose names do
    not start with ``_`` or ``.`` (Spark's and Hive's hidden files), sorted by name.
    Subdirectories are not looked into."""
    info = fs.get_file_info(directory)
    if info.type != pafs.FileType.Directory:
        raise CompactionError(f"partition directory not found: {directory}")
    found = [
        FileStat(name=i.base_name, path=i.path, size=int(i.size or 0))
        for i in fs.get_file_info(pafs.FileSelector(directory))
        if i.type == pafs.FileType.File and not _is_hidden(i.base_name)
    ]
    return sorted(found, key=lambda f: f.name)


# --------------------------------------------------------------------------- checksum
#
# An order-independent content checksum: each row gets a 64-bit hash, and the checksum is
# the sum of the row hashes modulo 2**64. A row's hash is splitmix64's finalizer applied to
# a weighted sum of its columns' terms (each column has its own odd weight, so which column
# a value is in counts). A fixed-width column's term is its value's exact bits (every NaN
# counts as one canonical NaN; a null as a constant); any other column's term is a 64-bit
# hash of the value: strings and other byte values get a polynomial hash over their bytes,
# lists a polynomial hash over their elements' hashes, structs a mix of their fields'
# hashes, dictionary-encoded values the hash of their dictionary entry (so a column hashes
# the same whether it was read dictionary-encoded or not). Everything is computed with
# pyarrow.compute kernels (no per-value Python), by reinterpreting value buffers as
# unsigned integers.

_U64 = pa.uint64()
_MASK = (1 << 64) - 1
_POLY = 0x100000001B3
_POLY_INV = pow(_POLY, -1, 1 << 64)
_NULL_HASH = 0x6A09E667F3BCC909
_NAN_BITS = 0x7FF8000000000000
_LEN_SALT = 0x9E3779B97F4A7C15
_FIELD_SALT = 0xC2B2AE3D27D4EB4F


def _u64(value: int) -> pa.Scalar:
    return pa.scalar(value & _MASK, _U64)


def _mix(values: pa.Array) -> pa.Array:
    """splitmix64's finalizer, element-wise on a uint64 array."""
    x = pc.bit_wise_xor(values, pc.shift_right(values, _u64(30)))
    x = pc.multiply(x, _u64(0xBF58476D1CE4E5B9))
    x = pc.bit_wise_xor(x, pc.shift_right(x, _u64(27)))
    x = pc.multiply(x, _u64(0x94D049BB133111EB))
    return pc.bit_wise_xor(x, pc.shift_right(x, _u64(31)))


def _arange(n: int, step: int = 1) -> pa.Array:
    if n == 0:
        return pa.array([], pa.int64())
    ones = pa.repeat(pa.scalar(step, pa.int64()), n)
    return pc.subtract(pc.cumulative_sum(ones), pa.scalar(step, pa.int64()))


_POWER_CACHE: dict[int, pa.Array] = {}


def _powers(base: int, n: int) -> pa.Array:
    """``base**0 .. base**(n-1)`` modulo 2**64 (cached, grown by doubling)."""
    cached = _POWER_CACHE.get(base)
    if cached is None or len(cached) < n:
        size = max(n, 2 * len(cached) if cached is not None else 1 << 16)
        rest = pc.cumulative_prod(pa.repeat(_u64(base), size - 1))
        cached = pa.concat_arrays([pa.array([1], _U64), rest])
        _POWER_CACHE[base] = cached
    return cached.slice(0, n)


def _segment_poly(values: pa.Array, offsets: pa.Array) -> pa.Array:
    """Per segment ``[offsets[i], offsets[i+1])`` of the uint64 ``values``:
    ``sum(values[j] * P**(j - offsets[i]))`` mod 2**64 — order-sensitive within a segment,
    independent of where the segment sits."""
    n_values = len(values)
    terms = pc.multiply(values, _powers(_POLY, n_values))
    prefix = pa.concat_arrays([pa.array([0], _U64), pc.cumulative_sum(terms)])
    starts = offsets.slice(0, len(offsets) - 1)
    ends = offsets.slice(1)
    raw = pc.subtract(pc.take(prefix, ends), pc.take(prefix, starts))
    inverse = _powers(_POLY_INV, n_values + 1)
    return pc.multiply(raw, pc.take(inverse, starts))


def _with_lengths(hashes: pa.Array, offsets: pa.Array) -> pa.Array:
    lengths = pc.subtract(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
    salted = pc.multiply(pc.cast(lengths, _U64), _u64(_LEN_SALT))
    return _mix(pc.add(hashes, salted))


def _hash_bytes(data: pa.Buffer | None, offsets: pa.Array) -> pa.Array:
    """Hash byte strings: ``offsets`` (int64, n+1) index into ``data``."""
    start = offsets[0].as_py()
    end = offsets[len(offsets) - 1].as_py()
    length = end - start
    if length and data is not None:
        raw = pa.Array.from_buffers(pa.uint8(), length, [None, data], offset=start)
        values = pc.add(pc.cast(raw, _U64), _u64(1))
    else:
        values = pa.array([], _U64)
    relative = pc.subtract(offsets, pa.scalar(start, pa.int64()))
    return _with_lengths(_segment_poly(values, relative), relative)


def _view(arr: pa.Array, width: int) -> pa.Array:
    """The array's value buffer as unsigned integers of ``width`` bytes, as uint64."""
    kind = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}[width]
    raw = pa.Array.from_buffers(kind, len(arr), [None, arr.buffers()[1]], offset=arr.offset)
    return pc.cast(raw, _U64)


def _python_hash(arr: pa.Array) -> pa.Array:
    """Fallback for types without a vectorized hash: hash each value's repr."""
    out = []
    for value in arr.to_pylist():
        digest = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little"))
    return pa.array(out, _U64)


def _hash_array(arr: pa.Array) -> pa.Array:
    """A uint64 hash per element of ``arr`` (never null)."""
    n = len(arr)
    if n == 0:
        return pa.array([], _U64)
    t = arr.type
    if isinstance(arr, pa.ExtensionArray):
        return _hash_array(arr.storage)
    if pa.types.is_null(t):
        return pa.repeat(_u64(_NULL_HASH), n)
    if pa.types.is_string_view(t):
        return _hash_array(arr.cast(pa.large_string()))
    if pa.types.is_binary_view(t):
        return _hash_array(arr.cast(pa.large_binary()))
    if pa.types.is_list_view(t):
        return _hash_array(arr.cast(pa.list_(t.value_field)))
    if pa.types.is_large_list_view(t):
        return _hash_array(arr.cast(pa.large_list(t.value_field)))

    if pa.types.is_dictionary(t):
        # each distinct value is hashed once; indices that are null give null here
        hashed = pc.take(_hash_array(arr.dictionary), arr.indices)
    elif pa.types.is_boolean(t):
        hashed = _mix(pc.add(pc.cast(arr, _U64), _u64(0x51)))
    elif (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        buffers = arr.buffers()
        offset_type = (
            pa.int64() if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else pa.int32()
        )
        offsets = pa.Array.from_buffers(offset_type, n + 1, [None, buffers[1]], offset=arr.offset)
        hashed = _hash_bytes(buffers[2], pc.cast(offsets, pa.int64()))
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        child = arr.values.slice(arr.offset * size, n * size)
        offsets = _arange(n + 1, size)
        hashed = _with_lengths(_segment_poly(_hash_array(child), offsets), offsets)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = pc.cast(arr.offsets, pa.int64())
        first = offsets[0].as_py()
        last = offsets[len(offsets) - 1].as_py()
        child = arr.values.slice(first, last - first)
        relative = pc.subtract(offsets, pa.scalar(first, pa.int64()))
        hashed = _with_lengths(_segment_poly(_hash_array(child), relative), relative)
    elif pa.types.is_struct(t):
        acc = pa.repeat(_u64(0x2545F4914F6CDD1D), n)
        for index, child in enumerate(arr.flatten()):
            salt = _u64((index + 1) * _FIELD_SALT)
            acc = pc.add(acc, _mix(pc.add(_hash_array(child), salt)))
        hashed = _mix(acc)
    elif t.num_buffers == 2 and t.bit_width in (8, 16, 32, 64):
        bits = _view(arr, t.bit_width // 8)
        if pa.types.is_floating(t):
            bits = pc.if_else(pc.fill_null(pc.is_nan(arr), False), _u64(_NAN_BITS), bits)
        hashed = _mix(bits)
    elif t.num_buffers == 2 and t.bit_width % 8 == 0:
        # decimal128/256, fixed_size_binary, month_day_nano intervals: fixed-width bytes
        width = t.bit_width // 8
        offsets = pc.add(_arange(n + 1, width), pa.scalar(arr.offset * width, pa.int64()))
        hashed = _hash_bytes(arr.buffers()[1], offsets)
    else:
        hashed = _python_hash(arr)
    if arr.null_count:
        hashed = pc.if_else(arr.is_valid(), hashed, _u64(_NULL_HASH))
    return hashed


def _is_plain_fixed_width(t: pa.DataType) -> bool:
    """Integers, floats, dates, times, timestamps, durations: one value buffer of 1-8 bytes."""
    return (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
    ) and t.bit_width in (8, 16, 32, 64)


_DictionaryCache = dict[int, tuple[pa.Array, pa.Array]]
"""Per column index: the last dictionary seen and its values' hashes."""


def _column_term(arr: pa.Array, index: int, dictionaries: _DictionaryCache) -> pa.Array:
    """Column ``index``'s contribution to each row's hash (uint64, never null)."""
    if _is_plain_fixed_width(arr.type):
        # the exact bits: cheap, and distinct values give distinct terms
        term = _view(arr, arr.type.bit_width // 8)
        if pa.types.is_floating(arr.type):
            term = pc.if_else(pc.fill_null(pc.is_nan(arr), False), _u64(_NAN_BITS), term)
    elif pa.types.is_dictionary(arr.type):
        # batches of one row group share a dictionary: hash its values once
        cached = dictionaries.get(index)
        if cached is None or not cached[0].equals(arr.dictionary):
            cached = (arr.dictionary, _hash_array(arr.dictionary))
            dictionaries[index] = cached
        term = pc.take(cached[1], arr.indices)
    else:
        return pc.multiply(_hash_array(arr), _u64(((index + 1) * _FIELD_SALT) | 1))
    if arr.null_count:
        term = pc.if_else(arr.is_valid(), term, _u64(_NULL_HASH))
    return pc.multiply(term, _u64(((index + 1) * _FIELD_SALT) | 1))


def _batch_checksum(batch: pa.RecordBatch, dictionaries: _DictionaryCache | None = None) -> int:
    """The sum of ``batch``'s row hashes mod 2**64. Pass the same ``dictionaries`` dict
    for consecutive batches of a file, so that a shared dictionary is hashed once."""
    n = batch.num_rows
    if n == 0:
        return 0
    cache: _DictionaryCache = {} if dictionaries is None else dictionaries
    acc = pa.repeat(_u64(_LEN_SALT), n)
    for index in range(batch.num_columns):
        acc = pc.add(acc, _column_term(batch.column(index), index, cache))
    total = pc.sum(_mix(acc)).as_py()
    return int(total or 0) & _MASK


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


def _dense(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
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


def _read_batches(
    fs: pafs.FileSystem, path: str, storage_format: StorageFormat, data: pa.Buffer | None = None
) -> Iterator[pa.RecordBatch]:
    """The file's rows in batches, from ``data`` (its bytes, already read) if given.
    Parquet columns chosen by :func:`_dictionary_columns` come as dictionary arrays
    (:func:`_dense` turns them back)."""
    opened = fs.open_input_file(path) if data is None else pa.BufferReader(data)
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
            yield from pf.iter_batches(batch_size=_BATCH_ROWS, use_threads=False)
        else:
            of = orc.ORCFile(source)
            for stripe in range(of.nstripes):
                yield from pa.Table.from_batches([of.read_stripe(stripe)]).to_batches(
                    max_chunksize=_BATCH_ROWS
                )


def _read_file(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    with fs.open_input_file(path) as source:
        data: pa.Buffer = source.read_buffer()
    return data


def _prefetched(
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


def _check_format(storage_format: str) -> StorageFormat:
    if storage_format == "parquet":
        return "parquet"
    if storage_format == "orc":
        return "orc"
    raise CompactionError(f"storage_format must be 'parquet' or 'orc', got {storage_format!r}")


def compute_checksum(
    fs: pafs.FileSystem, paths: Sequence[str], storage_format: str
) -> tuple[int, int]:
    """``(rows, checksum)`` of the Parquet or ORC files ``paths``.

    The checksum is order-independent (the same multiset of rows gives the same value,
    however the rows are spread over files, row groups or stripes) and exact: every
    value's bits count, except that all NaNs are one value. It supports every Arrow type
    (nested lists, maps and structs, nullable at any level, decimals, timestamps).
    Parquet INT96 timestamps are read at microsecond precision (Spark's), so that dates
    outside the nanosecond range do not overflow.
    """
    fmt = _check_format(storage_format)
    rows = 0
    checksum = 0
    for path in paths:
        dictionaries: _DictionaryCache = {}
        for batch in _read_batches(fs, path, fmt):
            rows += batch.num_rows
            checksum = (checksum + _batch_checksum(batch, dictionaries)) & _MASK
    return rows, checksum


def parquet_or_orc_rows(fs: pafs.FileSystem, path: str, storage_format: str | None) -> int | None:
    """Row count from a Parquet or ORC file's footer; None for other formats."""
    if storage_format not in ("parquet", "orc"):
        return None
    with fs.open_input_file(path) as source:
        if storage_format == "parquet":
            return int(pq.ParquetFile(source).metadata.num_rows)
        return int(orc.ORCFile(source).nrows)


# --------------------------------------------------------------------------- manifest


def write_manifest(fs: pafs.FileSystem, directory: str, entry: dict[str, Any]) -> str:
    """Append ``entry`` (plus a UTC timestamp) to ``<directory>/_hcat_compaction.json``.

    The file holds ``{"format": "hcat-compaction-manifest", "version": 1,
    "compactions": [...]}``, the latest compaction last. It is replaced atomically where
    the filesystem's rename is. Returns the manifest's path.
    """
    path = posixpath.join(directory, MANIFEST_NAME)
    document: dict[str, Any] = {
        "format": "hcat-compaction-manifest",
        "version": 1,
        "compactions": [],
    }
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as f:
            try:
                existing = json.loads(f.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CompactionError(f"unreadable compaction manifest {path}: {exc}") from exc
        if isinstance(existing, dict) and isinstance(existing.get("compactions"), list):
            document["compactions"] = existing["compactions"]
    stamped = {"compacted_at": datetime.now(UTC).isoformat(timespec="seconds"), **entry}
    document["compactions"].append(stamped)
    temp = posixpath.join(directory, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
    with fs.open_output_stream(temp, compression=None) as f:
        f.write(json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    fs.move(temp, path)
    return path


# --------------------------------------------------------------------------- merge


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


def _groups(files: Sequence[FileStat], target: int) -> list[list[FileStat]]:
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


def delete_data_file(fs: pafs.FileSystem, path: str) -> None:
    """Delete a data file and its Hadoop checksum sidecar ``.<name>.crc`` if present.

    Hadoop's local filesystem (what Spark uses for ``file:`` paths) writes such a hidden
    sidecar next to every file; a stale one would outlive the file it describes.
    """
    fs.delete_file(path)
    parent, name = posixpath.split(path)
    with contextlib.suppress(OSError):
        fs.delete_file(posixpath.join(parent, f".{name}.crc"))


def _delete_quietly(fs: pafs.FileSystem, paths: Sequence[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            fs.delete_file(path)


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
    deleted, the originals kept and :class:`IntegrityError` names the directory. Then
    the manifest ``_hcat_compaction.json`` is written, the new files are renamed to
    Spark-style visible names (``part-00000-<uuid>-c000.snappy.parquet``) and the
    originals deleted. ``_corrupt_hook`` (tests only) is called with ``(fs, path)`` for
    each temporary file before verification.
    """
    fmt = _check_format(storage_format)
    if policy.mode != "merge":
        raise CompactionError(f"policy mode is {policy.mode!r}, not 'merge' ({directory})")
    started = time.monotonic()
    directory = directory.rstrip("/")
    files = data_files(fs, directory)
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
        with contextlib.closing(_prefetched(fs, small)) as originals:
            for number, group in enumerate(_groups(small, policy.target_file_bytes)):
                temp = posixpath.join(directory, f"{_TEMP_PREFIX}{token}-{number:05d}.tmp")
                temp_paths.append(temp)
                writer = _Writer(fs, temp, options)
                try:
                    for _ in group:
                        stat, data = next(originals)
                        file_rows = 0
                        dictionaries: _DictionaryCache = {}
                        for batch in _read_batches(fs, stat.path, fmt, data):
                            if verify:
                                checksum_before = (
                                    checksum_before + _batch_checksum(batch, dictionaries)
                                ) & _MASK
                            batch = _dense(batch, expected_schema)
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
                raise IntegrityError(
                    f"merge of partition {directory} failed verification: originals hold "
                    f"{rows_before} rows (checksum {checksum_before:016x}), rewritten files "
                    f"{rows_after} rows (checksum {checksum_after:016x}); originals kept"
                )
    except CompactionError:
        _delete_quietly(fs, temp_paths)
        raise
    except (OSError, pa.ArrowException) as exc:
        _delete_quietly(fs, temp_paths)
        raise CompactionError(f"merge of partition {directory} failed: {exc}") from exc
    except BaseException:
        _delete_quietly(fs, temp_paths)
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


def compact_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    policy: CompactionPolicy,
    storage_format: str,
    force: bool = False,
) -> PartitionCompaction | None:
    """Compact one partition directory as ``policy`` says, if it triggers.

    Returns None (and touches nothing) when ``policy.triggers`` is False for the
    directory's data files, unless ``force``. Mode ``merge`` runs :func:`merge_partition`
    (Parquet and ORC only: other formats raise :class:`CompactionError`); mode ``har``
    runs :func:`spark_output.har.archive_partition` (any format).
    """
    if not force and not policy.triggers(data_files(fs, directory)):
        return None
    if policy.mode == "har":
        from spark_output.har import archive_partition

        return archive_partition(fs, directory, policy=policy, storage_format=storage_format)
    if storage_format not in ("parquet", "orc"):
        raise CompactionError(
            f"cannot merge {storage_format} partition {directory}: merge mode supports "
            "parquet and orc; use mode='har'"
        )
    return merge_partition(fs, directory, storage_format=storage_format, policy=policy)
