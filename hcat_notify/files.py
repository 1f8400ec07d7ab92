"""Table and partition locations on any filesystem pyarrow knows (local, HDFS, S3).

Locations are Hadoop path strings, as Hive stores them, never URIs to decode: a
partition directory ``region=us%2Feast`` (the value ``us/east``, escaped as Hive and
Spark escape directory names) is that very name on disk. What counts as a data file
(:func:`is_hidden`) and what a location is (:class:`TableLocation`) have one answer
here, for the service (``partitions add``, ``discover``, purges) and for
``spark_output`` alike. pyarrow is imported with this module, which only commands that
touch files load.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

from hcat_notify.errors import InvalidInputError, LocationNotFoundError

__all__ = [
    "FileStat",
    "TableLocation",
    "is_hidden",
    "list_data_files",
    "measure_partition",
    "path_exists",
    "split_location",
    "storage_location",
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


def storage_location(location: str) -> str:
    """Where a location's files are stored: for ``har://<scheme>-<authority>/…/x.har[/inner]``
    (a Hadoop Archive, as ``HarFileSystem`` names it) the archive directory on the
    underlying filesystem, else ``location`` itself."""
    scheme, authority, path = split_location(location)
    if scheme != "har":
        return location
    under, _, host = authority.partition("-")
    segments = path.split("/")
    archive = next((i for i, s in enumerate(segments) if s.endswith(".har")), len(segments) - 1)
    path = "/".join(segments[: archive + 1])
    return f"file://{path}" if under == "file" else f"{under}://{host}{path}"


def is_hidden(name: str) -> bool:
    """Spark and Hive skip names starting with ``_`` or ``.`` (_SUCCESS, .crc, staging)."""
    return name.startswith(("_", "."))


def path_exists(filesystem: pafs.FileSystem, path: str) -> bool:
    """Whether anything (file or directory) is at ``path``."""
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def list_data_files(filesystem: pafs.FileSystem, directory: str) -> list[FileStat]:
    """A partition's data files: regular files directly in ``directory`` that are not
    hidden (:func:`is_hidden`), sorted by name. Subdirectories are not looked into.

    Raises:
        LocationNotFoundError: ``directory`` is not a directory.
    """
    if filesystem.get_file_info(directory).type != pafs.FileType.Directory:
        raise LocationNotFoundError(f"partition directory not found: {directory}")
    found = [
        FileStat(name=info.base_name, path=info.path, size=int(info.size or 0))
        for info in filesystem.get_file_info(pafs.FileSelector(directory))
        if info.type == pafs.FileType.File and not is_hidden(info.base_name)
    ]
    return sorted(found, key=lambda stat: stat.name)


def measure_partition(location: str) -> tuple[TableLocation, list[FileStat]]:
    """A partition's location, resolved, and the data files in it.

    Raises:
        LocationNotFoundError: the location does not exist, is not a directory, or
            holds no data files (only hidden ones, or none).
        InvalidInputError: the location is malformed or its filesystem is unknown.
    """
    try:
        where = TableLocation.parse(location)
    except (ValueError, OSError) as exc:
        raise InvalidInputError(f"cannot use location {location!r}: {exc}") from exc
    try:
        files = list_data_files(where.fs, where.path)
    except OSError as exc:
        if isinstance(exc, LocationNotFoundError):
            raise
        raise LocationNotFoundError(f"cannot list {location}: {exc}") from exc
    if not files:
        raise LocationNotFoundError(
            f"location {location} holds no data files (hidden files such as _SUCCESS and "
            ".crc do not count)"
        )
    return where, files
