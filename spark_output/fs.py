"""Filesystem access through pyarrow.fs (local, HDFS, S3): locations, listing, moves, deletes.

Every listing, stat and delete helper of spark_output lives here. Locations and "what is
a data file" are hcat_notify's (:mod:`hcat_notify.files`: :class:`TableLocation`,
:func:`is_hidden`), re-exported so that both packages give one answer.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from collections.abc import Iterable, Sequence

from pyarrow import fs as pafs

from hcat_notify import (
    FileStat,
    LocationNotFoundError,
    TableLocation,
    is_hidden,
    remove_empty_below,
    split_location,
)
from hcat_notify import list_data_files as _list_data_files
from hcat_notify import path_exists as exists
from hcat_notify.errors import LinkInPartitionError
from hcat_notify.files import (
    new_file_at,
    open_data_file,
    open_data_file_at,
    open_partition_dir,
)
from spark_output.errors import PartitionDirectoryNotFoundError

__all__ = [
    "FileStat",
    "TableLocation",
    "crc_sidecar",
    "delete_data_file",
    "delete_dir_quietly",
    "delete_files_quietly",
    "exists",
    "is_hidden",
    "link_or_copy",
    "list_data_files",
    "move",
    "open_data_file",
    "remove_empty_dir",
    "split_location",
]


def list_data_files(
    filesystem: pafs.FileSystem, directory: str, *, bases: Sequence[str] = ()
) -> list[FileStat]:
    """A partition's data files (:func:`hcat_notify.list_data_files`; on the local
    filesystem reached from ``bases`` without following a link).

    Raises:
        PartitionDirectoryNotFoundError: ``directory`` is not a directory.
    """
    try:
        return _list_data_files(filesystem, directory, bases=bases)
    except LocationNotFoundError as exc:
        raise PartitionDirectoryNotFoundError(str(exc)) from exc


def move(filesystem: pafs.FileSystem, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (a file or a directory), creating the parent."""
    filesystem.create_dir(posixpath.dirname(target), recursive=True)
    filesystem.move(source, target)


def link_or_copy(
    filesystem: pafs.FileSystem, source: str, target: str, *, bases: Sequence[str] = ()
) -> None:
    """Make ``target`` (a new file) hold ``source``'s bytes: a hard link on a local
    filesystem (data files are immutable, so sharing the inode is safe and costs no I/O),
    else a copy.

    Locally both directories are reached from ``bases`` without following a link
    (:func:`hcat_notify.files.open_partition_dir`), ``source`` is opened as a regular
    file (never a link, never a FIFO), and the link or copy is made relative to those
    descriptors: a directory swapped for a link after the listing is refused, nothing
    read through it.

    Raises:
        LinkInPartitionError: (local) a link on the way or at ``source``, or ``source``
            is not a regular file, or it changed while being linked.
        OSError: the link or copy failed.
    """
    if not isinstance(filesystem, pafs.LocalFileSystem):
        filesystem.copy_file(source, target)
        return
    source_dir, source_name = posixpath.split(os.path.abspath(source))
    target_dir, target_name = posixpath.split(os.path.abspath(target))
    with (
        open_partition_dir(source_dir, bases) as source_fd,
        open_partition_dir(target_dir, bases) as target_fd,
    ):
        fd = open_data_file_at(source_fd, source_name, source)
        with os.fdopen(fd, "rb") as reader:
            opened = os.fstat(fd)
            try:
                os.link(
                    source_name,
                    target_name,
                    src_dir_fd=source_fd,
                    dst_dir_fd=target_fd,
                    follow_symlinks=False,
                )
            except OSError:
                pass  # e.g. a filesystem without hard links: copy what was opened instead
            else:
                linked = os.lstat(target_name, dir_fd=target_fd)
                if (linked.st_dev, linked.st_ino) == (opened.st_dev, opened.st_ino):
                    return
                os.unlink(target_name, dir_fd=target_fd)
                raise LinkInPartitionError(
                    f"{source} was replaced while it was being linked; nothing is copied"
                )
            with new_file_at(target_fd, target_name) as writer:
                shutil.copyfileobj(reader, writer)


def crc_sidecar(path: str) -> str:
    """The hidden checksum file ``.<name>.crc`` that Hadoop's local filesystem (what
    Spark uses for ``file:`` paths) writes next to every file it writes."""
    parent, name = posixpath.split(path)
    return posixpath.join(parent, f".{name}.crc")


def delete_data_file(filesystem: pafs.FileSystem, path: str) -> None:
    """Delete a data file and its :func:`crc_sidecar` if present (a stale sidecar would
    outlive the file it describes)."""
    filesystem.delete_file(path)
    with contextlib.suppress(OSError):
        filesystem.delete_file(crc_sidecar(path))


def remove_empty_dir(filesystem: pafs.FileSystem, directory: str) -> bool:
    """Remove ``directory`` if it is empty (pyarrow's ``delete_dir`` is recursive); False
    when it is not empty, or not there.

    On a local filesystem this is one ``rmdir``, which refuses a directory that is not
    empty, so a file that another process moves in at the same moment is never deleted
    with it. Elsewhere (no such call in pyarrow) it checks, then deletes.

    Raises:
        OSError: any other failure to remove it.
    """
    if isinstance(filesystem, pafs.LocalFileSystem):
        written = os.path.abspath(directory)
        return remove_empty_below(written, [posixpath.dirname(written)])
    if not exists(filesystem, directory) or filesystem.get_file_info(pafs.FileSelector(directory)):
        return False
    filesystem.delete_dir(directory)
    return True


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
