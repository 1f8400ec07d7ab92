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

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from pyarrow import fs as pafs

from hcat_notify.errors import (
    InvalidInputError,
    LinkInPartitionError,
    LocationNotFoundError,
    UnsafeMoveError,
)
from hcat_notify.model.locations import split_location, storage_location
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.safe_delete import warehouse_bases
from hcat_notify.safe_move import open_dir_below
from hcat_notify.store.records import NewPartition, TableInfo
from hcat_notify.warehouse import Warehouse

__all__ = [
    "FileStat",
    "TableLocation",
    "is_hidden",
    "list_data_files",
    "measure_partition",
    "measure_partitions",
    "new_file_at",
    "open_data_file",
    "open_data_file_at",
    "open_partition_dir",
    "partition_bases",
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


def list_data_files(
    filesystem: pafs.FileSystem, directory: str, *, bases: Sequence[str] = ()
) -> list[FileStat]:
    """A partition's data files: regular files directly in ``directory`` that are not
    hidden (:func:`is_hidden`), sorted by name. Subdirectories are not looked into.

    On the local filesystem nothing is followed: the directory is reached from the
    outermost of ``bases`` that holds it (else from its parent) without following a
    link (:func:`open_partition_dir`), listed through that descriptor, and a visible
    entry that is a symbolic link is refused, since whatever it points to (a file
    outside the warehouse, say) would be counted, compacted and exported as the
    partition's data (docs/operations.md, "Warehouse roots").

    Raises:
        LocationNotFoundError: ``directory`` is not a directory.
        LinkInPartitionError: (local) ``directory`` holds a visible symbolic link, or a
            directory on the way from its base is one.
    """
    if isinstance(filesystem, pafs.LocalFileSystem):
        with open_partition_dir(directory, bases) as fd:
            return _list_local(directory, fd)
    if filesystem.get_file_info(directory).type != pafs.FileType.Directory:
        raise LocationNotFoundError(f"partition directory not found: {directory}")
    found = [
        FileStat(name=info.base_name, path=info.path, size=int(info.size or 0))
        for info in filesystem.get_file_info(pafs.FileSelector(directory))
        if info.type == pafs.FileType.File and not is_hidden(info.base_name)
    ]
    return sorted(found, key=lambda stat: stat.name)


def partition_bases(roots: Sequence[str], table_location: str) -> tuple[str, ...]:
    """The trusted directories from which a table's local partition directories are
    reached (:func:`open_partition_dir`): the warehouse roots (as written and resolved),
    and the table's registered location (an external table's place)."""
    bases = warehouse_bases(roots)
    with contextlib.suppress(ValueError, OSError):
        where = TableLocation.parse(table_location)
        if isinstance(where.fs, pafs.LocalFileSystem) and where.path not in bases:
            bases.append(where.path)
    return tuple(bases)


def _first_link(path: str, bases: Sequence[str]) -> str | None:
    """The first component of ``path`` below the outermost of ``bases`` holding it that
    is a symbolic link now (for a message: the base itself may be a link, trusted)."""
    parts = [part for part in path.split("/") if part]
    held = [
        top
        for top in ([part for part in base.split("/") if part] for base in bases)
        if parts[: len(top)] == top
    ]
    start = min((len(top) for top in held), default=0)
    for end in range(start + 1, len(parts) + 1):
        shown = "/" + "/".join(parts[:end])
        if os.path.islink(shown):
            return shown
    return None


@contextmanager
def open_partition_dir(directory: str, bases: Sequence[str] = ()) -> Iterator[int]:
    """A descriptor of the local directory ``directory``, reached from the outermost of
    ``bases`` that holds it (the warehouse roots, the table's registered location), else
    from its parent, every component below that base opened with ``O_NOFOLLOW``
    (:func:`hcat_notify.open_dir_below`): a directory swapped for a link is refused,
    never followed.

    Raises:
        LinkInPartitionError: a component below the base is a symbolic link.
        LocationNotFoundError: ``directory`` (or a component) is missing or not a directory.
    """
    written = os.path.abspath(directory)
    trusted = [*bases, posixpath.dirname(written.rstrip("/")) or "/"]
    with contextlib.ExitStack() as stack:
        try:
            fd = stack.enter_context(open_dir_below(written, trusted))
        except UnsafeMoveError as exc:
            link = _first_link(written, trusted)
            if link is None:
                raise LinkInPartitionError(f"cannot read {directory}: {exc}") from exc
            raise LinkInPartitionError(
                f"{link} is a symbolic link (to {os.readlink(link)}); a partition's "
                f"directory is never read through a link: nothing of {directory} is read"
            ) from exc
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise LocationNotFoundError(f"partition directory not found: {directory}") from exc
        yield fd


def _list_local(directory: str, fd: int) -> list[FileStat]:
    found = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if is_hidden(entry.name):
                continue
            path = posixpath.join(directory, entry.name)
            if entry.is_symlink():
                raise LinkInPartitionError(
                    f"{path} is a symbolic link (to {os.readlink(entry.name, dir_fd=fd)}); a "
                    "partition's data files must be regular files in its directory, never "
                    "links: replace it with the file or remove it"
                )
            if entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                found.append(FileStat(name=entry.name, path=path, size=size))
    return sorted(found, key=lambda stat: stat.name)


def new_file_at(dir_fd: int, name: str, mode: int = 0o644) -> BinaryIO:
    """A new file ``name`` in the directory ``dir_fd``, open for writing: created
    ``O_CREAT | O_EXCL | O_NOFOLLOW``, so never one that exists nor a link planted there.

    Raises:
        FileExistsError: something (a link included) is at ``name``.
        OSError: it cannot be created (``ELOOP`` on some systems for a link).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(name, flags, mode, dir_fd=dir_fd), "wb")


def open_data_file_at(dir_fd: int, name: str, shown: str) -> int:
    """A descriptor (blocking, read-only) of the regular file ``name`` in the directory
    ``dir_fd``, never through a link (``O_NOFOLLOW``) and never blocking on a FIFO or a
    device put in its place (opened ``O_NONBLOCK``, checked with ``fstat``, then made
    blocking). ``shown`` is its path, for messages.

    Raises:
        LinkInPartitionError: it is a symbolic link, or not a regular file.
        OSError: it cannot be opened.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkInPartitionError(
                f"{shown} is a symbolic link (to {os.readlink(name, dir_fd=dir_fd)}); data "
                "files are never read through a link"
            ) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise LinkInPartitionError(
                f"{shown} is not a regular file (a FIFO, device, socket or directory); "
                "data files are read only from regular files"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_data_file(
    filesystem: pafs.FileSystem, path: str, *, bases: Sequence[str] = ()
) -> pa.NativeFile:
    """A data file opened for reading (random access). On the local filesystem its
    directory is reached as :func:`open_partition_dir` reaches it (from ``bases``, else
    from its parent) and the file opened by :func:`open_data_file_at`: a link planted
    after :func:`list_data_files` listed the directory, in its place or in any directory
    on the way, is refused, not read; a FIFO put in its place is refused, not waited on.

    Raises:
        LinkInPartitionError: (local) a symbolic link on the way or at ``path``, or not a
            regular file.
        OSError: it cannot be opened.
    """
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return filesystem.open_input_file(path)
    written = os.path.abspath(path)
    directory, name = posixpath.split(written)
    with open_partition_dir(directory, bases) as dir_fd:
        fd = open_data_file_at(dir_fd, name, written)
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
