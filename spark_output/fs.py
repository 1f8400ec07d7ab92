"""Filesystem access through pyarrow.fs (local, HDFS, S3): locations, listing, moves, deletes.

Every listing, stat and delete helper of spark_output lives here, so that "what is a data
file" (:func:`is_hidden`) and "what is a location" (:class:`TableLocation`) have one
answer. Locations are Hadoop path strings, as Hive stores them, never URIs to decode:
a partition directory ``region=us%2Feast`` (the value ``us/east``, escaped as Hive and
Spark escape directory names) is that very name on disk, and ``region=a b`` may hold a
space.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

from spark_output.errors import PartitionDirectoryNotFoundError

__all__ = [
    "FileStat",
    "TableLocation",
    "delete_data_file",
    "delete_dir_quietly",
    "delete_files_quietly",
    "exists",
    "is_hidden",
    "link_or_copy",
    "list_data_files",
    "move",
    "split_location",
]


@dataclass(frozen=True)
class FileStat:
    """A data file: its ``name`` in its directory, full ``path`` on the filesystem, ``size``."""

    name: str
    path: str
    size: int


def split_location(location: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a Hadoop path string, as ``org.apache.hadoop.fs.Path``
    splits it: the scheme ends at the first ``:`` before any ``/``, an authority follows
    ``//``; nothing is decoded. A plain path has scheme and authority ``""``."""
    colon = location.find(":")
    slash = location.find("/")
    if colon <= 1 or (slash != -1 and slash < colon):  # no scheme (or a drive letter)
        return "", "", location
    scheme, rest = location[:colon], location[colon + 1 :]
    if rest.startswith("//"):
        end = rest.find("/", 2)
        authority, path = (rest[2:], "/") if end == -1 else (rest[2:end], rest[end:])
        return scheme, authority, path
    return scheme, "", rest


@dataclass(frozen=True)
class TableLocation:
    """A table's or partition's root: the filesystem, the path within it, and its location
    string (the Hadoop path string Spark and the registry use)."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @classmethod
    def parse(cls, location: str) -> TableLocation:
        """Resolve a location: a local path, or a Hadoop path string with a scheme
        (``file:///data/t``, ``file:/data/t``, ``hdfs://nn:8020/t``, ``s3://bucket/t``).

        The path part is taken literally (Hive's locations are not URI-encoded): ``%2F``
        stays ``%2F``, spaces and any unicode stay as they are.

        Raises:
            ValueError: the location names no path, or pyarrow knows no filesystem for its
                scheme (``pyarrow.ArrowInvalid`` is a ``ValueError``).
        """
        scheme, authority, path = split_location(location)
        if not scheme:
            absolute = str(Path(location).expanduser().resolve())
            return cls(pafs.LocalFileSystem(), absolute, f"file://{absolute}")
        if not path.startswith("/"):
            raise ValueError(f"location {location!r} has no absolute path")
        path = posixpath.normpath(path)
        uri = location.rstrip("/") or location
        if scheme == "file":
            if authority not in ("", "localhost"):
                raise ValueError(f"location {location!r} names a remote host for file:")
            return cls(pafs.LocalFileSystem(), path, uri)
        # Only the filesystem comes from pyarrow's URI parser: scheme and authority hold
        # no escapes, the path might.
        filesystem, root = pafs.FileSystem.from_uri(f"{scheme}://{authority}/")
        return cls(filesystem, posixpath.join(root, path.lstrip("/")) if root else path, uri)

    def join(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def uri_of(self, path: str) -> str:
        """The location string of a path under this location (for Spark and the registry)."""
        relative = posixpath.relpath(path, self.path)
        return self.uri if relative == "." else f"{self.uri}/{relative}"


def is_hidden(name: str) -> bool:
    """Spark and Hive skip names starting with ``_`` or ``.`` (_SUCCESS, .crc, staging)."""
    return name.startswith(("_", "."))


def exists(filesystem: pafs.FileSystem, path: str) -> bool:
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def list_data_files(filesystem: pafs.FileSystem, directory: str) -> list[FileStat]:
    """A partition's data files: regular files directly in ``directory`` that are not
    hidden (:func:`is_hidden`), sorted by name. Subdirectories are not looked into.

    Raises:
        PartitionDirectoryNotFoundError: ``directory`` is not a directory.
    """
    if filesystem.get_file_info(directory).type != pafs.FileType.Directory:
        raise PartitionDirectoryNotFoundError(f"partition directory not found: {directory}")
    found = [
        FileStat(name=info.base_name, path=info.path, size=int(info.size or 0))
        for info in filesystem.get_file_info(pafs.FileSelector(directory))
        if info.type == pafs.FileType.File and not is_hidden(info.base_name)
    ]
    return sorted(found, key=lambda stat: stat.name)


def move(filesystem: pafs.FileSystem, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (a file or a directory), creating the parent."""
    filesystem.create_dir(posixpath.dirname(target), recursive=True)
    filesystem.move(source, target)


def link_or_copy(filesystem: pafs.FileSystem, source: str, target: str) -> None:
    """Make ``target`` hold ``source``'s bytes: a hard link on a local filesystem (data
    files are immutable, so sharing the inode is safe and costs no I/O), else a copy."""
    if isinstance(filesystem, pafs.LocalFileSystem):
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # e.g. a filesystem without hard links: copy instead
    filesystem.copy_file(source, target)


def delete_data_file(filesystem: pafs.FileSystem, path: str) -> None:
    """Delete a data file and its Hadoop checksum sidecar ``.<name>.crc`` if present.

    Hadoop's local filesystem (what Spark uses for ``file:`` paths) writes such a hidden
    sidecar next to every file; a stale one would outlive the file it describes.
    """
    filesystem.delete_file(path)
    parent, name = posixpath.split(path)
    with contextlib.suppress(OSError):
        filesystem.delete_file(posixpath.join(parent, f".{name}.crc"))


def delete_files_quietly(filesystem: pafs.FileSystem, paths: Iterable[str]) -> None:
    """Delete files that only this process uses (temporaries), ignoring failures."""
    for path in paths:
        with contextlib.suppress(OSError):
            filesystem.delete_file(path)


def delete_dir_quietly(filesystem: pafs.FileSystem, directory: str) -> None:
    """Delete a directory this process created (a copy, an archive) after a failure,
    ignoring errors: the failure being reported matters more than the leftover."""
    with contextlib.suppress(OSError):
        filesystem.delete_dir(directory)
