"""Filesystem access for the committer, through pyarrow.fs (local, HDFS, S3 URIs)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

__all__ = ["FileStat", "TableLocation", "exists", "is_hidden", "list_data_files", "move"]


@dataclass(frozen=True)
class FileStat:
    """A data file: its path (as the filesystem names it) and size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class TableLocation:
    """A table's root: the filesystem, the path within it, and the URI Spark uses."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @classmethod
    def parse(cls, location: str) -> TableLocation:
        """Resolve a table location (absolute path or URI such as ``file:///``, ``hdfs://``)."""
        if "://" not in location:
            absolute = str(Path(location).expanduser().resolve())
            return cls(pafs.LocalFileSystem(), absolute, f"file://{absolute}")
        filesystem, path = pafs.FileSystem.from_uri(location)
        return cls(filesystem, path, location.rstrip("/"))

    def join(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def uri_of(self, path: str) -> str:
        """The URI of a path under this location (for Spark and the registry)."""
        relative = posixpath.relpath(path, self.path)
        return self.uri if relative == "." else f"{self.uri}/{relative}"


def is_hidden(name: str) -> bool:
    """Spark and Hive skip names starting with ``_`` or ``.`` (_SUCCESS, .crc, staging)."""
    return name.startswith(("_", "."))


def exists(filesystem: pafs.FileSystem, path: str) -> bool:
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def list_data_files(filesystem: pafs.FileSystem, directory: str) -> list[FileStat]:
    """Visible files directly in ``directory`` (not hidden, not in sub-directories)."""
    infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(
        (
            FileStat(info.path, int(info.size or 0))
            for info in infos
            if info.type == pafs.FileType.File and not is_hidden(info.base_name)
        ),
        key=lambda stat: stat.path,
    )


def move(filesystem: pafs.FileSystem, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (a file or a directory), creating the parent."""
    filesystem.create_dir(posixpath.dirname(target), recursive=True)
    filesystem.move(source, target)
