"""Merge a partition's small Parquet or ORC files into few large ones, verified.

:func:`merge_partition` runs three steps: :func:`rewrite` the small files into merged
ones under hidden temporary names (keeping what Spark wrote, see
:mod:`~spark_output.compaction.rewrite_format`), :func:`verify_rows` (row count and
:func:`~spark_output.compaction.checksum.compute_checksum` against the originals'), and
:func:`publish` them by renaming — atomic for a staged (unpublished) directory, which is
where the committer runs it. Maintenance merges a copy and switches the registered
location instead (:mod:`spark_output.maintenance.compact_table`).
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs

from spark_output.compaction.checksum import (
    MASK,
    DictionaryCache,
    batch_checksum,
    compute_checksum,
)
from spark_output.compaction.manifest import write_manifest
from spark_output.compaction.read import (
    StorageFormat,
    check_format,
    dense,
    prefetched,
    read_batches,
)
from spark_output.compaction.result import PartitionCompaction
from spark_output.compaction.rewrite_format import (
    MergedFileWriter,
    WriteOptions,
    write_options,
)
from spark_output.errors import CompactionError, VerificationError
from spark_output.fs import FileStat, delete_data_file, delete_files_quietly, list_data_files

if TYPE_CHECKING:
    from spark_output.compaction.policy import CompactionPolicy

__all__ = [
    "SPARK_ROW_METADATA",
    "Rewritten",
    "merge_partition",
    "plan_groups",
    "publish",
    "rewrite",
    "verify_rows",
]

SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"
"""Parquet footer key under which Spark stores its schema (kept by the merge)."""

_TEMP_PREFIX = ".hcat-compact-"


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


@dataclass
class Rewritten:
    """What :func:`rewrite` wrote: the merged files under temporary names, and the rows
    (and, when computed, the checksum) of the originals they came from."""

    directory: str
    fmt: StorageFormat
    options: WriteOptions
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    temp_paths: list[str] = field(default_factory=list)
    temp_rows: list[int] = field(default_factory=list)
    rows_by_name: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    checksum: int = 0


@contextlib.contextmanager
def _discarded_on_failure(fs: pafs.FileSystem, rewritten: Rewritten) -> Iterator[None]:
    """Delete the temporary files if the block fails; I/O errors become CompactionError."""
    try:
        yield
    except CompactionError:
        delete_files_quietly(fs, rewritten.temp_paths)
        raise
    except (OSError, pa.ArrowException) as exc:
        delete_files_quietly(fs, rewritten.temp_paths)
        raise CompactionError(f"merge of partition {rewritten.directory} failed: {exc}") from exc
    except BaseException:
        delete_files_quietly(fs, rewritten.temp_paths)
        raise


def _copy_file(
    fs: pafs.FileSystem,
    out: Rewritten,
    writer: MergedFileWriter,
    stat: FileStat,
    data: pa.Buffer,
    *,
    checksum: bool,
    first: FileStat,
) -> None:
    expected = out.options.schema
    file_rows = 0
    dictionaries: DictionaryCache = {}
    for batch in read_batches(fs, stat.path, out.fmt, data):
        if checksum:
            out.checksum = (out.checksum + batch_checksum(batch, dictionaries)) & MASK
        batch = dense(batch, expected)
        if not batch.schema.equals(expected, check_metadata=False):
            raise CompactionError(
                f"cannot merge partition {out.directory}: {stat.name} has "
                f"schema {batch.schema} but {first.name} has {expected}"
            )
        file_rows += batch.num_rows
        writer.write(batch)
    out.rows_by_name[stat.name] = file_rows
    out.rows += file_rows


def rewrite(
    fs: pafs.FileSystem,
    directory: str,
    small: Sequence[FileStat],
    *,
    fmt: StorageFormat,
    target_file_bytes: int,
    checksum: bool,
) -> Rewritten:
    """Rewrite ``small`` (in order) into hidden temporary files of ``directory``, one per
    group of at most ``target_file_bytes`` of input; the originals are untouched. With
    ``checksum`` the originals' checksum is computed from the same read.

    Raises:
        CompactionError: a file cannot be read or has another schema than the first
            (the temporary files are deleted).
    """
    out = Rewritten(directory, fmt, write_options(fs, small[0].path, fmt, directory))
    with _discarded_on_failure(fs, out), contextlib.closing(prefetched(fs, small)) as originals:
        for number, group in enumerate(plan_groups(small, target_file_bytes)):
            temp = posixpath.join(directory, f"{_TEMP_PREFIX}{out.token}-{number:05d}.tmp")
            out.temp_paths.append(temp)
            writer = MergedFileWriter(fs, temp, out.options)
            try:
                for _ in group:
                    stat, data = next(originals)
                    _copy_file(fs, out, writer, stat, data, checksum=checksum, first=small[0])
            finally:
                writer.close()
            out.temp_rows.append(writer.rows)
    return out


def verify_rows(fs: pafs.FileSystem, rewritten: Rewritten) -> None:
    """Check that the merged files hold the originals' rows (count and checksum).

    Raises:
        VerificationError: they do not (the temporary files are deleted).
    """
    with _discarded_on_failure(fs, rewritten):
        rows, checksum = compute_checksum(fs, rewritten.temp_paths, rewritten.fmt)
        if (rows, checksum) != (rewritten.rows, rewritten.checksum):
            raise VerificationError(
                f"merge of partition {rewritten.directory} failed verification: originals "
                f"hold {rewritten.rows} rows (checksum {rewritten.checksum:016x}), rewritten "
                f"files {rows} rows (checksum {checksum:016x}); originals kept"
            )


def _codec_suffix(codec: str) -> str:
    return "" if codec in ("none", "uncompressed") else f".{codec}"


def publish(
    fs: pafs.FileSystem,
    rewritten: Rewritten,
    files: Sequence[FileStat],
    small: Sequence[FileStat],
    *,
    verified: bool,
    started: float,
) -> PartitionCompaction:
    """Write the manifest, give the merged files Spark-style visible names, delete the
    originals, and say what was done."""
    directory = rewritten.directory
    codec = rewritten.options.compression
    extension = "parquet" if rewritten.fmt == "parquet" else "orc"
    final_names = [
        f"part-{number:05d}-{rewritten.token}-c000{_codec_suffix(codec)}.{extension}"
        for number in range(len(rewritten.temp_paths))
    ]
    sizes = [int(fs.get_file_info(p).size or 0) for p in rewritten.temp_paths]
    untouched = [f for f in files if f not in small]
    manifest = write_manifest(
        fs,
        directory,
        {
            "mode": "merge",
            "storage_format": rewritten.fmt,
            "codec": codec,
            "rows": rewritten.rows,
            "checksum": f"{rewritten.checksum:016x}" if verified else None,
            "verified": verified,
            "originals": [
                {"name": s.name, "size": s.size, "rows": rewritten.rows_by_name[s.name]}
                for s in small
            ],
            "outputs": [
                {"name": name, "size": size, "rows": rows}
                for name, size, rows in zip(final_names, sizes, rewritten.temp_rows, strict=True)
            ],
            "untouched": [f.name for f in untouched],
        },
    )
    for name, temp in zip(final_names, rewritten.temp_paths, strict=True):
        fs.move(temp, posixpath.join(directory, name))
    for stat in small:
        delete_data_file(fs, stat.path)
    return PartitionCompaction(
        directory=directory,
        mode="merge",
        files_before=len(files),
        files_after=len(untouched) + len(final_names),
        bytes_before=sum(f.size for f in files),
        bytes_after=sum(f.size for f in untouched) + sum(sizes),
        rows=rewritten.rows,
        checksum=rewritten.checksum if verified else None,
        seconds=time.monotonic() - started,
        manifest_path=manifest,
        new_files=tuple(final_names),
    )


def merge_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    storage_format: str,
    policy: CompactionPolicy,
    verify: bool = True,
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
    originals deleted.
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
    rewritten = rewrite(
        fs,
        directory,
        small,
        fmt=fmt,
        target_file_bytes=policy.target_file_bytes,
        checksum=verify,
    )
    if verify:
        verify_rows(fs, rewritten)
    return publish(fs, rewritten, files, small, verified=verify, started=started)
