"""Archiving one partition directory: :func:`archive_partition`, in three steps —
:func:`pack` (build the archive beside the files), :func:`check` (read it back through
its index) and :func:`publish` (manifest, then the originals go)."""

from __future__ import annotations

import dataclasses
import posixpath
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from spark_output.compaction.har.locations import ARCHIVE_NAME, filesystem_uri, har_uri
from spark_output.compaction.har.reader import verify_archive
from spark_output.compaction.har.writer import HarInfo, create_har
from spark_output.compaction.manifest import write_manifest
from spark_output.compaction.read import parquet_or_orc_rows
from spark_output.compaction.result import PartitionCompaction
from spark_output.errors import HarError
from spark_output.fs import FileStat, delete_data_file, delete_dir_quietly, list_data_files

if TYPE_CHECKING:
    from spark_output.compaction.policy import CompactionPolicy

__all__ = ["archive_partition", "check", "pack", "publish"]


def pack(fs: pafs.FileSystem, directory: str, originals: Sequence[FileStat]) -> HarInfo:
    """Archive ``originals`` under a hidden temporary name in ``directory``, then rename
    the archive to :data:`ARCHIVE_NAME` (the originals are untouched)."""
    final_dir = posixpath.join(directory, ARCHIVE_NAME)
    temp_dir = posixpath.join(directory, f".hcat-har-{uuid.uuid4().hex}.har")
    info = create_har(fs, directory, temp_dir, names=[s.name for s in originals])
    try:
        fs.move(temp_dir, final_dir)
    except BaseException:
        delete_dir_quietly(fs, temp_dir)
        raise
    return dataclasses.replace(info, archive_dir=final_dir)


def check(fs: pafs.FileSystem, directory: str, info: HarInfo) -> None:
    """Verify the packed archive; on a mismatch remove it (the originals stay).

    Raises:
        HarError: an archived file's bytes differ from the original's.
    """
    try:
        verify_archive(fs, info.archive_dir, info.sha256)
    except HarError as exc:
        delete_dir_quietly(fs, info.archive_dir)
        raise HarError(
            f"archive verification failed for partition {directory}: {exc}; "
            "originals kept, archive removed"
        ) from exc
    except BaseException:
        delete_dir_quietly(fs, info.archive_dir)
        raise


def publish(
    fs: pafs.FileSystem,
    directory: str,
    info: HarInfo,
    originals: Sequence[FileStat],
    rows_by_name: Mapping[str, int | None],
    *,
    storage_format: str | None,
    location: str,
    started: float,
) -> PartitionCompaction:
    """Write the manifest, delete the originals, and say what was done."""
    manifest = write_manifest(
        fs,
        directory,
        {
            "mode": "har",
            "storage_format": storage_format,
            "archive": ARCHIVE_NAME,
            "location": location,
            "parts": list(info.parts),
            "originals": [
                {"name": s.name, "size": s.size, "rows": rows_by_name[s.name]} for s in originals
            ],
            "archived": [
                {"path": e.path, "part": e.part, "offset": e.offset, "length": e.length}
                for e in info.entries
                if not e.is_dir
            ],
        },
    )
    for stat in originals:
        delete_data_file(fs, stat.path)
    known = [r for r in rows_by_name.values() if r is not None]
    part_bytes = sum(
        fs.get_file_info(posixpath.join(info.archive_dir, p)).size or 0 for p in info.parts
    )
    return PartitionCompaction(
        directory=directory,
        mode="har",
        files_before=len(originals),
        files_after=len(info.parts),
        bytes_before=sum(s.size for s in originals),
        bytes_after=part_bytes,
        rows=sum(known) if storage_format and len(known) == len(originals) else None,
        checksum=None,
        seconds=time.monotonic() - started,
        new_location=location,
        manifest_path=manifest,
        new_files=tuple(info.parts),
    )


def archive_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    policy: CompactionPolicy,
    storage_format: str | None = None,
    base_uri: str | None = None,
) -> PartitionCompaction:
    """Pack a partition's data files into ``<directory>/_hcat_archive.har``.

    Every visible file (names not starting with ``_`` or ``.``) is archived — also those
    at or above ``policy.small_file_bytes``, since the partition's location moves into the
    archive. The archive is built under a hidden temporary name, renamed to
    ``_hcat_archive.har``, verified (each archived file's bytes, via the index as
    ``HarFileSystem`` reads it, hash equal to the original's), and only then are the
    originals deleted and the manifest ``_hcat_compaction.json`` written. On a mismatch
    the archive is removed, the originals stay and :class:`HarError` names the partition.

    ``storage_format`` (``"parquet"``/``"orc"``) only adds row counts to the result and
    manifest. The result's ``new_location`` is the ``har://`` URI of the archive's root
    (:func:`har_uri`), to be registered as the partition's location; ``base_uri`` is
    passed to :func:`filesystem_uri` for filesystems that need it.
    """
    if policy.mode != "har":
        raise HarError(f"policy mode is {policy.mode!r}, not 'har' ({directory})")
    started = time.monotonic()
    directory = directory.rstrip("/")
    final_dir = posixpath.join(directory, ARCHIVE_NAME)
    if fs.get_file_info(final_dir).type != pafs.FileType.NotFound:
        raise HarError(f"partition {directory} is already archived ({final_dir} exists)")
    originals = list_data_files(fs, directory)
    if not originals:
        raise HarError(f"no data files to archive in partition {directory}")
    rows_by_name: dict[str, int | None] = {
        stat.name: parquet_or_orc_rows(fs, stat.path, storage_format) if storage_format else None
        for stat in originals
    }
    info = pack(fs, directory, originals)
    check(fs, directory, info)
    location = har_uri(filesystem_uri(fs, info.archive_dir, base_uri=base_uri))
    return publish(
        fs,
        directory,
        info,
        originals,
        rows_by_name,
        storage_format=storage_format,
        location=location,
        started=started,
    )
