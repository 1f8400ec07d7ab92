"""Moving local files and directories without following a symbolic link.

A write's moves (and recovery's, and their undo) on a local filesystem go through
:func:`move_below`: the parent directories of the source and of the target are reached
from a trusted base (the outermost of: a warehouse root, the table's registered location,
a partition's registered location) one path component at a time, each opened with
``O_NOFOLLOW``; the entry itself is renamed relative to those descriptors
(``os.rename(name, name, src_dir_fd=..., dst_dir_fd=...)``), so a link planted in any
component after a check is refused, never followed. The source may not be a link, and
may be required to be a given directory (its inode). What is guaranteed where:
docs/operations.md, "Warehouse roots".
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hcat_notify.errors import UnsafeMoveError

__all__ = ["move_below", "open_dir_below", "remove_empty_below", "stat_below"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LINK = "a symbolic link; nothing is moved through or as a link"


def _components(path: str) -> list[str]:
    if not path.startswith("/"):
        raise UnsafeMoveError(f"{path} is not an absolute path; nothing is moved")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeMoveError(f"{path} has a '..' component; nothing is moved")
    return parts


def _split(path: str, bases: Sequence[str]) -> tuple[str, list[str]]:
    """The outermost base that is ``path`` or holds it, and the components below it."""
    parts = _components(path)
    for base in sorted(bases, key=lambda b: len(_components(b))):
        top = _components(base)
        if parts[: len(top)] == top:
            return "/" + "/".join(top), parts[len(top) :]
    raise UnsafeMoveError(
        f"{path} is not inside {', '.join(bases) or 'any base'}; nothing is moved there"
    )


def _step(fd: int, name: str, shown: str) -> int:
    """Open the directory ``name`` in ``fd`` without following a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            raise UnsafeMoveError(f"{shown} is {_LINK}") from exc
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), shown) from exc


@contextmanager
def open_dir_below(path: str, bases: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``path``, opened from the outermost of ``bases``
    that is it or holds it (the base as it is: trusted; every component below it with
    ``O_NOFOLLOW``), creating missing components when ``create``.

    Raises:
        UnsafeMoveError: ``path`` is not absolute, has a ``..`` component, is in no
            base, or a component below the base is a symbolic link.
        NotADirectoryError: a component is a file.
        FileNotFoundError: a component is missing (and not ``create``).
    """
    base, parts = _split(path, bases)
    fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        shown = base.rstrip("/")
        for part in parts:
            shown = f"{shown}/{part}"
            try:
                fds.append(_step(fds[-1], part, shown))
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: _step checks it
                    os.mkdir(part, dir_fd=fds[-1])
                fds.append(_step(fds[-1], part, shown))
        yield fds[-1]
    finally:
        for fd in fds:
            os.close(fd)


def stat_below(path: str, bases: Sequence[str]) -> os.stat_result | None:
    """What ``path`` is (never followed if it is a link), reached as :func:`open_dir_below`
    reaches its parent; None when it, or a parent, is missing.

    Raises:
        UnsafeMoveError: see :func:`open_dir_below`.
    """
    parent, name = posixpath.split(path.rstrip("/"))
    try:
        with open_dir_below(parent, bases) as fd:
            return os.lstat(name, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError):
        return None


def move_below(source: str, target: str, bases: Sequence[str], *, inode: int | None = None) -> None:
    """Rename ``source`` to ``target`` (a file or a directory), creating ``target``'s
    missing parents, both reached from ``bases`` (:func:`open_dir_below`). Like
    ``rename(2)``, it replaces a file, or an empty directory, at ``target``.

    Args:
        source, target: absolute local paths, as written (not resolved).
        bases: trusted directories (module docstring).
        inode: when given, ``source`` must be this directory (``st_ino``: a rename keeps
            it, and never crosses filesystems).

    Raises:
        UnsafeMoveError: a component of either path is a symbolic link (``source``
            itself included), a path is in no base, or ``source`` is not ``inode``.
        FileNotFoundError: ``source`` is missing.
        OSError: the rename failed.
    """
    source_dir, source_name = posixpath.split(source.rstrip("/"))
    target_dir, target_name = posixpath.split(target.rstrip("/"))
    with open_dir_below(source_dir, bases) as source_fd:
        found = os.lstat(source_name, dir_fd=source_fd)
        if stat.S_ISLNK(found.st_mode):
            raise UnsafeMoveError(f"{source} is {_LINK}")
        if inode is not None and found.st_ino != inode:
            raise UnsafeMoveError(
                f"{source} is not the directory this job staged (inode {found.st_ino}, "
                f"journalled {inode}); nothing is moved"
            )
        with open_dir_below(target_dir, bases, create=True) as target_fd:
            os.rename(source_name, target_name, src_dir_fd=source_fd, dst_dir_fd=target_fd)


def remove_empty_below(path: str, bases: Sequence[str]) -> bool:
    """Remove the directory ``path`` if it is empty (one ``rmdir`` relative to its parent,
    reached as :func:`open_dir_below` reaches it); False when it is not empty, or missing.

    Raises:
        UnsafeMoveError: see :func:`open_dir_below`.
        OSError: any other failure (``path`` itself a link: ``ENOTDIR``).
    """
    parent, name = posixpath.split(path.rstrip("/"))
    try:
        with open_dir_below(parent, bases) as fd:
            os.rmdir(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True
