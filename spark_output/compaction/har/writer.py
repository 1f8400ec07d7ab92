"""Writing a Hadoop Archive: :func:`create_har` copies a directory's files into part
files and writes the index that ``HarFileSystem`` reads."""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from spark_output.compaction.har.index import (
    DIR_PERMISSION,
    FILE_PERMISSION,
    HAR_VERSION,
    HarEntry,
    index_bytes,
    index_order,
)
from spark_output.errors import HarError
from spark_output.fs import delete_dir_quietly, open_data_file

__all__ = ["DEFAULT_PART_SIZE", "HarInfo", "create_har"]

DEFAULT_PART_SIZE = 2 * 1024**3
"""Bytes per part file before a new one is started (``HadoopArchives.partSize``: 2 GiB)."""

_COPY_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class HarInfo:
    """What :func:`create_har` wrote."""

    archive_dir: str
    version: int
    parts: tuple[str, ...]
    files: int
    directories: int
    bytes: int
    entries: tuple[HarEntry, ...]
    sha256: dict[str, str] = dataclasses.field(default_factory=dict)
    """hex SHA-256 of each archived file's bytes, by path inside the archive."""


def _owner_group() -> tuple[str, str]:
    user = getpass.getuser()
    try:
        import grp  # not on every platform

        group = grp.getgrgid(os.getgid()).gr_name
    except (ImportError, KeyError):
        group = user
    return user, group


def _mtime_ms(info: pafs.FileInfo) -> int:
    mtime_ns = info.mtime_ns
    return int(mtime_ns // 1_000_000) if mtime_ns is not None else int(time.time() * 1000)


def _top_entries(
    fs: pafs.FileSystem, source_dir: str, archive_dir: str, names: Sequence[str] | None
) -> list[pafs.FileInfo]:
    top = [
        info
        for info in fs.get_file_info(pafs.FileSelector(source_dir))
        if info.path.rstrip("/") != archive_dir
    ]
    if names is not None:
        wanted = set(names)
        top = [info for info in top if info.base_name in wanted]
        missing = wanted - {info.base_name for info in top}
        if missing:
            raise HarError(f"not found in {source_dir}: {sorted(missing)}")
    return top


def _walk(
    fs: pafs.FileSystem,
    root: pafs.FileInfo,
    top: list[pafs.FileInfo],
    owner: tuple[str, str],
) -> tuple[list[HarEntry], list[tuple[str, pafs.FileInfo]]]:
    """The directory entries below ``root`` and the files to copy, as (archive path, info)."""
    entries: list[HarEntry] = []
    files: list[tuple[str, pafs.FileInfo]] = []

    def visit(archive_path: str, info: pafs.FileInfo, children: list[pafs.FileInfo]) -> None:
        children = sorted(children, key=lambda c: c.base_name)
        entries.append(
            HarEntry(
                path=archive_path,
                is_dir=True,
                modification_time_ms=_mtime_ms(info),
                permission=DIR_PERMISSION,
                owner=owner[0],
                group=owner[1],
                children=tuple(c.base_name for c in children),
            )
        )
        for child in children:
            child_path = posixpath.join(archive_path, child.base_name)
            if child.type == pafs.FileType.Directory:
                visit(child_path, child, fs.get_file_info(pafs.FileSelector(child.path)))
            elif child.type == pafs.FileType.File:
                files.append((child_path, child))
            else:
                raise HarError(f"cannot archive {child.path}: not a file or directory")

    visit("/", root, top)
    return entries, files


@dataclass
class _Parts:
    """The part files being written: the current one, and each copied file's place."""

    fs: pafs.FileSystem
    archive_dir: str
    part_size: int
    names: list[str] = dataclasses.field(default_factory=list)
    position: int = 0
    total: int = 0
    sha256: dict[str, str] = dataclasses.field(default_factory=dict)
    _out: pa.NativeFile | None = None

    def copy(self, archive_path: str, info: pafs.FileInfo, owner: tuple[str, str]) -> HarEntry:
        size = info.size or 0
        if self._out is None or (self.position > 0 and self.position + size > self.part_size):
            self.close()
            self.names.append(f"part-{len(self.names)}")
            self._out = self.fs.open_output_stream(
                posixpath.join(self.archive_dir, self.names[-1]), compression=None
            )
            self.position = 0
        digest = hashlib.sha256()
        copied = 0
        with open_data_file(self.fs, info.path) as src:
            while chunk := src.read(_COPY_CHUNK):
                digest.update(chunk)
                self._out.write(chunk)
                copied += len(chunk)
        if copied != size:
            raise HarError(f"{info.path} changed size while archiving")
        self.sha256[archive_path] = digest.hexdigest()
        entry = HarEntry(
            path=archive_path,
            is_dir=False,
            part=self.names[-1],
            offset=self.position,
            length=size,
            modification_time_ms=_mtime_ms(info),
            permission=FILE_PERMISSION,
            owner=owner[0],
            group=owner[1],
        )
        self.position += size
        self.total += size
        return entry

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def _write_index(fs: pafs.FileSystem, archive_dir: str, entries: Sequence[HarEntry]) -> None:
    index, master = index_bytes(entries)
    # _index first: HarFileSystem needs both, and a reader racing us sees no
    # _masterindex until the index it points into is complete.
    with fs.open_output_stream(posixpath.join(archive_dir, "_index"), compression=None) as f:
        f.write(index)
    with fs.open_output_stream(posixpath.join(archive_dir, "_masterindex"), compression=None) as f:
        f.write(master)


def create_har(
    fs: pafs.FileSystem,
    source_dir: str,
    archive_dir: str,
    *,
    names: Sequence[str] | None = None,
    part_size: int = DEFAULT_PART_SIZE,
) -> HarInfo:
    """Archive ``source_dir`` into the new directory ``archive_dir`` (``*.har``).

    The archive's root ``/`` is ``source_dir``: a file ``source_dir/a/b`` is ``/a/b``
    inside it. ``names`` limits the archive to these top-level entries of ``source_dir``
    (files or directories, archived recursively); by default everything in
    ``source_dir`` is archived except ``archive_dir`` itself. Files are copied into
    ``part-0``, ``part-1``, ... starting a new part before a file that would make the
    current one exceed ``part_size``. ``archive_dir`` must not exist. Modification times
    come from the source files; permissions are 0644/0755 and owner/group the current
    user's (``HarFileSystem`` does not use them).
    """
    if part_size <= 0:
        raise HarError(f"part_size must be positive, got {part_size}")
    source_dir = source_dir.rstrip("/") or "/"
    archive_dir = archive_dir.rstrip("/")
    if not archive_dir.endswith(".har"):
        raise HarError(f"archive directory name must end with .har: {archive_dir}")
    if fs.get_file_info(archive_dir).type != pafs.FileType.NotFound:
        raise HarError(f"archive already exists: {archive_dir}")
    root_info = fs.get_file_info(source_dir)
    if root_info.type != pafs.FileType.Directory:
        raise HarError(f"not a directory: {source_dir}")
    owner = _owner_group()
    top = _top_entries(fs, source_dir, archive_dir, names)
    entries, files = _walk(fs, root_info, top, owner)

    fs.create_dir(archive_dir, recursive=True)
    parts = _Parts(fs, archive_dir, part_size)
    try:
        try:
            entries += [parts.copy(path, info, owner) for path, info in files]
        finally:
            parts.close()
        _write_index(fs, archive_dir, entries)
    except BaseException:
        delete_dir_quietly(fs, archive_dir)
        raise
    return HarInfo(
        archive_dir=archive_dir,
        version=HAR_VERSION,
        parts=tuple(parts.names),
        files=len(files),
        directories=len(entries) - len(files),
        bytes=parts.total,
        entries=tuple(index_order(entries)),
        sha256=parts.sha256,
    )
