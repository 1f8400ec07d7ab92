"""Where an export writes: a new or empty directory, checked, then filled with new files only.

:func:`check_destination` refuses, before anything is written, a destination that is a
file, that holds anything, that is, holds or lies inside a registered table's or
partition's location, that is or holds a warehouse root, or (local) that is reached
through a symbolic link anywhere on its path. :func:`open_destination` then creates it,
descending the checked path (never resolved again) without following a link; on the
local filesystem every directory below it is made fresh
(``mkdir``) and opened ``O_NOFOLLOW``, every file is created ``O_CREAT | O_EXCL |
O_NOFOLLOW`` relative to its directory's descriptor, so that a link or file planted
during the export stops the export instead of being written through. docs/operations.md,
"Warehouse roots"; docs/cli.md, "export".
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, Protocol

from pyarrow import fs as pafs

from hcat_notify import Catalog, InvalidInputError, TableLocation, UnsafeMoveError, open_dir_below
from hcat_notify.files import new_file_at
from hcat_notify.lifecycle import location_holders
from hcat_notify.warehouse import Warehouse, location_key
from spark_output.transfer.manifest import MANIFEST_NAME

__all__ = ["ExportTarget", "check_destination", "open_destination"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ExportTarget(Protocol):
    """The destination of an export, opened: new files below it, and the final rename."""

    uri: str

    def make_dirs(self, relative: str) -> None:
        """The directory ``relative`` (``/``-separated) and those above it."""

    def new_file(self, relative: str) -> BinaryIO:
        """A new file at ``relative`` (``/``-separated), its directories made as needed."""

    def rename(self, relative: str, final: str) -> None:
        """Rename the file ``relative`` to ``final`` in the destination's top directory."""


def _is_local(where: TableLocation) -> bool:
    return isinstance(where.fs, pafs.LocalFileSystem)


def _refuse(label: str, why: str) -> InvalidInputError:
    """``label``: what was refused, ``export to /x``."""
    return InvalidInputError(f"cannot {label}: {why}; nothing written")


def check_destination(catalog: Catalog, destination: TableLocation, to: str, table: str) -> None:
    """Refuse a destination an export may not write to (``to`` as given, for messages).

    Raises:
        hcat_notify.InvalidInputError: a file; (local) a path reached through a symbolic
            link, at its final name or at any directory on the way (a link would choose
            where it lands; :func:`open_destination` then descends the checked path
            without following one); a directory that is not empty; at, inside
            or around a registered table's or partition's location (``table``'s own
            included); at or around a warehouse root.
    """
    label = f"export to {to}"
    path = destination.path
    if _is_local(destination):
        path = _unlinked(destination.path, location_key(to, resolve=False).path, label)
    kind = destination.fs.get_file_info(path).type
    if kind not in (pafs.FileType.Directory, pafs.FileType.NotFound):
        raise _refuse(label, "it is a file, not a directory")
    uses = location_holders(catalog, [destination.uri])[destination.uri]
    if uses:
        # The table's own location first: the usual mistake.
        use = sorted(uses, key=lambda u: (u.table != table, u.partition is not None))[0]
        raise _refuse(
            label,
            f"it overlaps {use.location}, where {use.table} keeps its files; choose a "
            "directory outside every table",
        )
    key = location_key(destination.uri)
    for root in Warehouse.of(catalog.settings).roots:
        if location_key(root).within(key):
            raise _refuse(label, f"it is or holds the warehouse root {root}")
    if kind == pafs.FileType.Directory and destination.fs.get_file_info(pafs.FileSelector(path)):
        held = destination.fs.get_file_info(posixpath.join(path, MANIFEST_NAME)).type
        raise _refuse(
            label,
            f"it already holds an export ({MANIFEST_NAME})"
            if held != pafs.FileType.NotFound
            else "it is not empty (an export writes only into a new or an empty directory, "
            "never over files)",
        )


@contextmanager
def open_destination(
    destination: TableLocation,
    to: str,
    *,
    action: str = "export to",
    unfinished: str = "the export is incomplete (it has no manifest)",
    bases: Sequence[str] | None = None,
) -> Iterator[ExportTarget]:
    """Create the checked destination (or take it empty) and yield it for writing.

    ``action`` and ``unfinished`` word the errors (``cannot export to /x: ...``, and what
    a stop midway leaves). Locally its path, as checked (never resolved again), is
    descended from ``/`` without following a link, or, given ``bases`` (trusted
    directories: an import's staging), from the outermost of them that holds it.

    Raises:
        hcat_notify.InvalidInputError: it cannot be created, or (local) something
            appeared in it, or a directory on the way became a link, since the check.
    """
    if not _is_local(destination):
        try:
            destination.fs.create_dir(destination.path, recursive=True)
        except OSError as exc:
            raise _refuse(f"{action} {to}", str(exc)) from exc
        yield _RemoteTarget(destination)
        return
    label = f"{action} {to}"
    fd = _create_below(destination.path, ["/"] if bases is None else bases, label)
    try:
        yield _LocalTarget(destination.uri, fd, label, unfinished)
    finally:
        os.close(fd)


def _unlinked(parsed: str, written: str, label: str) -> str:
    """``written`` (the destination as given, absolute), once checked that no component
    of it is a symbolic link and that it is the path ``parsed`` (resolved when parsed)."""
    shown = ""
    for part in [part for part in written.split("/") if part]:
        shown = f"{shown}/{part}"
        if os.path.islink(shown):
            where = "it is" if shown == written else f"{shown}, on its way, is"
            raise _refuse(
                label,
                f"{where} a symbolic link (to {os.readlink(shown)}); give the directory "
                "itself, reached through no link",
            )
    resolved = os.path.realpath(written)
    if not written == resolved == parsed:  # a link appeared since it was parsed
        raise _refuse(label, f"{written} now resolves to {resolved}; give the directory itself")
    return written


def _create_below(path: str, bases: Sequence[str], label: str) -> int:
    """Open (creating what is missing) the directory ``path`` from the outermost of
    ``bases`` that holds it (:func:`hcat_notify.open_dir_below`: nothing below the base
    followed); it must be new or empty. Its descriptor."""
    holding = [b for b in bases if path == b or path.startswith(b.rstrip("/") + "/")]
    try:
        if holding:  # the base itself (a new table's location outside the roots) may be new
            os.makedirs(min(holding, key=len), exist_ok=True)
        with open_dir_below(path, bases, create=True) as found:
            fd = os.dup(found)
    except UnsafeMoveError as exc:
        raise _refuse(label, str(exc).partition("; nothing is moved")[0]) from exc
    except OSError as exc:
        raise _refuse(label, f"cannot create {path}: {exc.strerror}") from exc
    if os.listdir(fd):
        os.close(fd)
        raise _refuse(label, "it is not empty (something appeared in it meanwhile)")
    return fd


class _LocalTarget:
    """A local destination: directories made fresh, files created exclusively, nothing
    followed."""

    def __init__(self, uri: str, fd: int, label: str, unfinished: str) -> None:
        self.uri = uri
        self._fd = fd
        self._label = label
        self._unfinished = unfinished
        self._made: set[str] = set()

    def _appeared(self, relative: str, exc: OSError) -> InvalidInputError:
        return InvalidInputError(
            f"{self._label} stopped: {relative} appeared meanwhile or is a link "
            f"({exc.strerror}); nothing is written through a link; {self._unfinished}"
        )

    def _directory(self, relative: str) -> int:
        """The descriptor of the directory ``relative``, made by this export."""
        fd = os.dup(self._fd)
        done = ""
        try:
            for part in [p for p in relative.split("/") if p]:
                done = posixpath.join(done, part)
                if done not in self._made:
                    try:
                        os.mkdir(part, dir_fd=fd)
                    except FileExistsError as exc:  # not made by this export
                        raise self._appeared(done, exc) from exc
                    self._made.add(done)
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise self._appeared(done, exc) from exc
                os.close(fd)
                fd = inner
            return fd
        except BaseException:
            os.close(fd)
            raise

    def make_dirs(self, relative: str) -> None:
        os.close(self._directory(relative))

    def new_file(self, relative: str) -> BinaryIO:
        directory = self._directory(posixpath.dirname(relative))
        try:
            return new_file_at(directory, posixpath.basename(relative), 0o666)
        except FileExistsError as exc:
            raise self._appeared(relative, exc) from exc
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise self._appeared(relative, exc) from exc
        finally:
            os.close(directory)

    def rename(self, relative: str, final: str) -> None:
        # A rename replaces a link planted at ``final``; it never writes through it.
        os.rename(relative, final, src_dir_fd=self._fd, dst_dir_fd=self._fd)


class _RemoteTarget:
    """HDFS or S3 through pyarrow: no links to follow; the check ran right before."""

    def __init__(self, destination: TableLocation) -> None:
        self.uri = destination.uri
        self._where = destination

    def make_dirs(self, relative: str) -> None:
        self._where.fs.create_dir(self._where.join(relative), recursive=True)

    def new_file(self, relative: str) -> BinaryIO:
        path = self._where.join(relative)
        self._where.fs.create_dir(posixpath.dirname(path), recursive=True)
        stream: BinaryIO = self._where.fs.open_output_stream(path)
        return stream

    def rename(self, relative: str, final: str) -> None:
        self._where.fs.move(self._where.join(relative), self._where.join(final))
