"""An order-independent content checksum of Parquet and ORC rows, to verify a merge.

An order-independent content checksum: each row gets a 64-bit hash, and the checksum is
the sum of the row hashes modulo 2**64. A row's hash is splitmix64's finalizer applied to
a weighted sum of its columns' terms (each column has its own odd weight, so which column
a value is in counts). A fixed-width column's term is its value's exact bits (every NaN
counts as one canonical NaN; a null as a constant); any other column's term is a 64-bit
hash of the value: strings and other byte values get a polynomial hash over their bytes,
lists a polynomial hash over their elements' hashes, structs a mix of their fields'
hashes, dictionary-encoded values the hash of their dictionary entry (so a column hashes
the same whether it was read dictionary-encoded or not). Everything is computed with
pyarrow.compute kernels (no per-value Python), by reinterpreting value buffers as
unsigned integers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from spark_output.compaction.read import check_format, read_batches

__all__ = ["MASK", "DictionaryCache", "batch_checksum", "compute_checksum"]

_U64 = pa.uint64()
MASK = (1 << 64) - 1
_POLY = 0x100000001B3
_POLY_INV = pow(_POLY, -1, 1 << 64)
_NULL_HASH = 0x6A09E667F3BCC909
_NAN_BITS = 0x7FF8000000000000
_LEN_SALT = 0x9E3779B97F4A7C15
_FIELD_SALT = 0xC2B2AE3D27D4EB4F


def _u64(value: int) -> pa.Scalar:
    return pa.scalar(value & MASK, _U64)


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


DictionaryCache = dict[int, tuple[pa.Array, pa.Array]]
"""Per column index: the last dictionary seen and its values' hashes."""


def _column_term(arr: pa.Array, index: int, dictionaries: DictionaryCache) -> pa.Array:
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


def batch_checksum(batch: pa.RecordBatch, dictionaries: DictionaryCache | None = None) -> int:
    """The sum of ``batch``'s row hashes mod 2**64. Pass the same ``dictionaries`` dict
    for consecutive batches of a file, so that a shared dictionary is hashed once."""
    n = batch.num_rows
    if n == 0:
        return 0
    cache: DictionaryCache = {} if dictionaries is None else dictionaries
    acc = pa.repeat(_u64(_LEN_SALT), n)
    for index in range(batch.num_columns):
        acc = pc.add(acc, _column_term(batch.column(index), index, cache))
    total = pc.sum(_mix(acc)).as_py()
    return int(total or 0) & MASK


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
    fmt = check_format(storage_format)
    rows = 0
    checksum = 0
    for path in paths:
        dictionaries: DictionaryCache = {}
        for batch in read_batches(fs, path, fmt):
            rows += batch.num_rows
            checksum = (checksum + batch_checksum(batch, dictionaries)) & MASK
    return rows, checksum
