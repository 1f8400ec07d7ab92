"""Deleting local directory trees without following a symbolic link.

Every local delete of a purge, of a compaction's purge, of a job's staging and trash and
of recovery goes through :func:`remove_tree`: the directory is reached from a trusted
base (a warehouse root, or a table's registered location) one path component at a time,
each opened with ``O_NOFOLLOW``, its identity compared with what the caller's check saw,
and the tree removed relative to its parent's descriptor (``shutil.rmtree`` with
``dir_fd``, which never follows a link inside the tree either). A path that is not
inside a base, or that runs through a link, is refused with :class:`UnsafeDeleteError`,
whose message names the path and why. What is guaranteed where: docs/operations.md,
"Warehouse roots".
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from hcat_notify.errors import UnsafeDeleteError
from hcat_notify.warehouse import location_key

__all__ = [
    "OpenedDir",
    "TreeEntry",
    "identity_of",
    "list_tree",
    "open_below",
    "remove_tree",
    "warehouse_bases",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Identity = tuple[int, int]
"""``(st_dev, st_ino)`` of a directory."""


@dataclass(frozen=True)
class OpenedDir:
    """A directory reached by :func:`open_below`: its descriptor, its parent's, its name."""

    parent_fd: int
    name: str
    fd: int


@dataclass(frozen=True)
class TreeEntry:
    """One entry below a directory (:func:`list_tree`), never followed if it is a link.

    ``kind``: ``file``, ``dir``, ``link`` or ``other``; ``path`` is relative, ``/``-separated.
    """

    path: str
    kind: str
    size: int
    links: int


def _relative_parts(path: str, bases: Sequence[str]) -> tuple[str, list[str]] | None:
    """The innermost base that holds ``path`` strictly, and the components below it."""
    for base in sorted(bases, key=lambda b: len(os.path.abspath(b)), reverse=True):
        top = os.path.abspath(base)
        if path.startswith(top.rstrip("/") + "/"):
            parts = [part for part in path[len(top.rstrip("/")) + 1 :].split("/") if part]
            if parts and all(part not in (".", "..") for part in parts):
                return base, parts
    return None


def _step(fd: int, name: str, shown: str) -> int:
    """Open the directory ``name`` in ``fd`` without following a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            try:
                mode = os.lstat(name, dir_fd=fd).st_mode
            except OSError:
                mode = 0
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
            raise UnsafeDeleteError(
                f"{shown} is {what}; nothing is deleted through a link"
            ) from exc
        raise


@contextmanager
def open_below(path: str, bases: Sequence[str]) -> Iterator[OpenedDir]:
    """Open the directory ``path`` from the innermost of ``bases`` that holds it strictly.

    The base is opened as it is (the operator's root, or a registered table location:
    trusted); every component below it is opened with ``O_NOFOLLOW``.

    Raises:
        UnsafeDeleteError: ``path`` is not strictly inside a base, or a component below
            the base is a symbolic link or not a directory.
        FileNotFoundError: a component does not exist.
    """
    written = os.path.abspath(path)
    found = _relative_parts(written, bases)
    if found is None:
        raise UnsafeDeleteError(f"{path} is not inside {', '.join(bases) or 'any root'}")
    base, parts = found
    fds = [os.open(os.path.abspath(base), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        shown = os.path.abspath(base).rstrip("/")
        for part in parts:
            shown = f"{shown}/{part}"
            fds.append(_step(fds[-1], part, shown))
        yield OpenedDir(parent_fd=fds[-2], name=parts[-1], fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def identity_of(path: str) -> Identity | None:
    """``(st_dev, st_ino)`` of what ``path`` names now (links followed: what a check that
    resolves symlinks saw), or None when nothing is there."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def remove_tree(path: str, bases: Sequence[str], *, expected: Identity | None = None) -> bool:
    """Delete the local directory tree ``path`` (see the module's docstring).

    Args:
        path: an absolute local path, as written (not resolved).
        bases: trusted directories, one of which must hold ``path`` strictly.
        expected: the identity (:func:`identity_of`) the caller's check saw: a
            different directory found at ``path`` now is refused.

    Returns:
        False when nothing was there, else True.

    Raises:
        UnsafeDeleteError: see :func:`open_below`; or not the directory checked.
        OSError: the deletion itself failed (possibly part-way).
    """
    try:
        with open_below(path, bases) as opened:
            found = os.fstat(opened.fd)
            if expected is not None and (found.st_dev, found.st_ino) != expected:
                raise UnsafeDeleteError(
                    f"{path} is not the directory that was checked (it was replaced meanwhile)"
                )
            shutil.rmtree(opened.name, dir_fd=opened.parent_fd)
    except FileNotFoundError:
        return False
    return True


def list_tree(fd: int) -> list[TreeEntry]:
    """Every entry below the directory ``fd``, depth first, links listed, never followed.

    Raises:
        UnsafeDeleteError: a directory was replaced by a link while it was listed.
        OSError: listing failed.
    """
    found: list[TreeEntry] = []
    pending: list[tuple[int, str]] = [(os.dup(fd), "")]
    try:
        while pending:
            directory, prefix = pending.pop()
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        info = entry.stat(follow_symlinks=False)
                        relative = f"{prefix}{entry.name}"
                        kind = _kind(info.st_mode)
                        if kind == "dir":
                            pending.append((_step(directory, entry.name, relative), relative + "/"))
                        found.append(TreeEntry(relative, kind, info.st_size, info.st_nlink))
            finally:
                os.close(directory)
    finally:
        for directory, _ in pending:
            os.close(directory)
    return found


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def warehouse_bases(roots: Sequence[str]) -> list[str]:
    """The local warehouse roots as bases for :func:`open_below`: each as written and as
    resolved (a root that is itself a link is the operator's choice)."""
    bases: list[str] = []
    for root in roots:
        for resolve in (False, True):
            key = location_key(root, resolve=resolve)
            if key.scheme == "file" and key.path not in bases:
                bases.append(key.path)
    return bases
