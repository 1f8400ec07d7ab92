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

import errno
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyarrow import fs as pafs

from hcat_notify.errors import InvalidInputError, LinkInPartitionError, LocationNotFoundError
from hcat_notify.model.locations import split_location, storage_location
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.records import NewPartition, TableInfo
from hcat_notify.warehouse import Warehouse

__all__ = [
    "FileStat",
    "TableLocation",
    "is_hidden",
    "list_data_files",
    "measure_partition",
    "measure_partitions",
    "open_data_file",
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


def path_exists(filesystem: pafs.FileSystem, path: str) -> bool:
    """Whether anything (file or directory) is at ``path``."""
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def list_data_files(filesystem: pafs.FileSystem, directory: str) -> list[FileStat]:
    """A partition's data files: regular files directly in ``directory`` that are not
    hidden (:func:`is_hidden`), sorted by name. Subdirectories are not looked into.

    On the local filesystem entries are not followed (``lstat``): a visible symbolic link
    is refused, since whatever it points to (a file outside the warehouse, say) would be
    counted, compacted and exported as the partition's data (docs/operations.md,
    "Warehouse roots").

    Raises:
        LocationNotFoundError: ``directory`` is not a directory.
        LinkInPartitionError: ``directory`` (local) holds a visible symbolic link.
    """
    if isinstance(filesystem, pafs.LocalFileSystem):
        return _list_local(directory)
    if filesystem.get_file_info(directory).type != pafs.FileType.Directory:
        raise LocationNotFoundError(f"partition directory not found: {directory}")
    found = [
        FileStat(name=info.base_name, path=info.path, size=int(info.size or 0))
        for info in filesystem.get_file_info(pafs.FileSelector(directory))
        if info.type == pafs.FileType.File and not is_hidden(info.base_name)
    ]
    return sorted(found, key=lambda stat: stat.name)


def _list_local(directory: str) -> list[FileStat]:
    if not os.path.isdir(directory):
        raise LocationNotFoundError(f"partition directory not found: {directory}")
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if is_hidden(entry.name):
                continue
            if entry.is_symlink():
                raise LinkInPartitionError(
                    f"{entry.path} is a symbolic link (to {os.readlink(entry.path)}); a "
                    "partition's data files must be regular files in its directory, never "
                    "links: replace it with the file or remove it"
                )
            if entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                found.append(FileStat(name=entry.name, path=entry.path, size=size))
    return sorted(found, key=lambda stat: stat.name)


def open_data_file(filesystem: pafs.FileSystem, path: str) -> pa.NativeFile:
    """A data file opened for reading (random access), never through a link on the local
    filesystem (``O_NOFOLLOW``): a link planted after :func:`list_data_files` listed the
    directory is refused, not read.

    Raises:
        LinkInPartitionError: ``path`` (local) is a symbolic link.
        OSError: it cannot be opened.
    """
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return filesystem.open_input_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkInPartitionError(
                f"{path} is a symbolic link (to {os.readlink(path)}); data files are never "
                "read through a link"
            ) from exc
        raise
    return pa.PythonFile(os.fdopen(fd, "rb"), mode="r")


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


def measure_partitions(
    table: TableInfo,
    located: Sequence[tuple[PartitionSpec | Mapping[str, str | None] | str, str]],
    warehouse: Warehouse,
    *,
    outside_warehouse: bool = False,
) -> list[NewPartition]:
    """Partitions to register from (full spec, location) pairs: each location checked
    against the warehouse roots before it is listed at all (any place for an external
    table), then measured (:func:`measure_partition`).

    Raises:
        InvalidInputError: a spec that is not a full spec of the table; a ``..`` segment
            or a filesystem's root.
        LocationOutsideWarehouseError: a managed table's location outside the roots.
        LocationNotFoundError: see :func:`measure_partition`.
    """
    new = []
    for raw_spec, location in located:
        spec = PartitionSpec.parse(raw_spec) if isinstance(raw_spec, str) else raw_spec
        full = table.spec(spec, partial=False)
        warehouse.check(
            location,
            external=table.table_type == "EXTERNAL_TABLE",
            outside_warehouse=outside_warehouse,
            what=f"location of partition {full.to_path()} of {table.name}",
        )
        where, files = measure_partition(location)
        size = sum(stat.size for stat in files)
        new.append(NewPartition(full, where.uri, file_count=len(files), total_bytes=size))
    return new
