"""Carrying out a :class:`~spark_output.commit.plan.CommitPlan`'s moves, and undoing them.

Every function here is idempotent, because recovery may run it again after a crash at
any point: a move already made is not made twice, one not made is not undone.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath

from pyarrow import fs as pafs

from hcat_notify import (
    InvalidInputError,
    NewPartition,
    PartitionSpec,
    UnsafeDeleteError,
    remove_tree,
    validate_job_id,
)
from spark_output.commit.plan import CommitPlan, MoveKind, PartitionMove
from spark_output.fs import TableLocation, crc_sidecar, exists, move, remove_empty_dir

__all__ = [
    "STAGING_DIR",
    "TRASH_DIR",
    "apply_moves",
    "job_dir_problem",
    "moves_done",
    "new_partitions",
    "remove_job_dirs",
    "undo_moves",
]

logger = logging.getLogger(__name__)

STAGING_DIR = "_hcat_staging"  # hidden from readers: the name starts with "_"
TRASH_DIR = "_hcat_trash"


def apply_moves(filesystem: pafs.FileSystem, plan: CommitPlan) -> None:
    """Perform the plan's moves; on failure undo what was done and re-raise."""
    try:
        for entry in plan.partitions:
            if entry.kind is MoveKind.DIR:
                if entry.trash is not None and exists(filesystem, entry.final):
                    move(filesystem, entry.final, entry.trash)
                move(filesystem, entry.staged, entry.final)
            elif not (entry.whole_dir and _rename_new_dir(filesystem, entry)):
                for file in entry.files:
                    move(filesystem, file.source, file.target)
    except Exception:
        undo_moves(filesystem, plan)
        raise


def _rename_new_dir(filesystem: pafs.FileSystem, entry: PartitionMove) -> bool:
    # One rename instead of one per file; False when a concurrent append to the same
    # partition created ``final`` meanwhile: then the files are moved one by one, next to
    # that writer's. A rename onto a non-empty directory fails; onto an empty one (a
    # writer that created it and is about to move its files in) it replaces it, and that
    # writer's moves, made by path, land in this directory.
    if exists(filesystem, entry.final):
        return False
    try:
        move(filesystem, entry.staged, entry.final)
    except OSError:
        if exists(filesystem, entry.staged) and exists(filesystem, entry.final):
            return False
        raise
    return True


def moves_done(filesystem: pafs.FileSystem, entry: PartitionMove) -> bool:
    """Whether every move of ``entry`` was made."""
    if entry.kind is MoveKind.DIR:
        return not exists(filesystem, entry.staged) and exists(filesystem, entry.final)
    return all(
        not exists(filesystem, file.source) and exists(filesystem, file.target)
        for file in entry.files
    )


def undo_moves(filesystem: pafs.FileSystem, plan: CommitPlan) -> None:
    """Put back whatever moves of ``plan`` were made."""
    for entry in reversed(plan.partitions):
        if entry.kind is MoveKind.DIR:
            if not exists(filesystem, entry.staged) and exists(filesystem, entry.final):
                move(filesystem, entry.final, entry.staged)
            if (
                entry.trash
                and exists(filesystem, entry.trash)
                and not exists(filesystem, entry.final)
            ):
                move(filesystem, entry.trash, entry.final)
            continue
        for file in reversed(entry.files):
            if not exists(filesystem, file.source) and exists(filesystem, file.target):
                move(filesystem, file.target, file.source)
            if entry.whole_dir and exists(filesystem, crc_sidecar(file.target)):
                # A directory renamed whole brought the files' checksum sidecars along.
                move(filesystem, crc_sidecar(file.target), crc_sidecar(file.source))
        if entry.new_dir:
            remove_empty_dir(filesystem, entry.final)


def new_partitions(plan: CommitPlan, location: TableLocation) -> list[NewPartition]:
    """What the plan registers: one :class:`hcat_notify.NewPartition` per partition."""
    return [
        NewPartition(
            spec=PartitionSpec.parse(entry.spec),
            location=entry.location or location.uri_of(entry.final),
            file_count=entry.file_count,
            total_bytes=entry.bytes,
            archived=entry.archived,
            files=tuple(location.uri_of(posixpath.join(entry.final, name)) for name in entry.added),
        )
        for entry in plan.partitions
    ]


def job_dir_problem(table_path: str, directory: str) -> str | None:
    """Why ``directory`` is not a job's staging or trash directory of the table at
    ``table_path`` (``<table>/_hcat_staging/<job id>``, ``<table>/_hcat_trash/<job id>``),
    or None."""
    parent, name = posixpath.split(posixpath.normpath(directory))
    allowed = [posixpath.normpath(posixpath.join(table_path, d)) for d in (STAGING_DIR, TRASH_DIR)]
    if parent not in allowed:
        return f"it is not in {allowed[0]} or {allowed[1]}"
    try:
        validate_job_id(name)
    except InvalidInputError as exc:
        return str(exc)
    return None


def _remove_job_dir(filesystem: pafs.FileSystem, table_path: str, directory: str) -> str | None:
    try:
        if isinstance(filesystem, pafs.LocalFileSystem):
            remove_tree(directory, [table_path])
        elif exists(filesystem, directory):
            filesystem.delete_dir(directory)
    except (UnsafeDeleteError, OSError) as exc:  # leftovers are hidden from readers
        return str(exc)
    return None


def remove_job_dirs(filesystem: pafs.FileSystem, table_path: str, *directories: str) -> list[str]:
    """Delete a job's staging/trash directories, and their parents once empty.

    Each must be ``<table>/_hcat_staging/<job id>`` or ``<table>/_hcat_trash/<job id>``
    (:func:`job_dir_problem`); a local one is deleted from the table's directory without
    following a link (:func:`hcat_notify.safe_delete.remove_tree`). What is not deleted
    is logged and returned, one line each (location and why).
    """
    kept: list[str] = []
    for directory in directories:
        problem = job_dir_problem(table_path, directory) or _remove_job_dir(
            filesystem, table_path, directory
        )
        if problem is not None:
            logger.warning("did not remove %s: %s", directory, problem)
            kept.append(f"{directory}: {problem}")
    for parent in (STAGING_DIR, TRASH_DIR):
        path = posixpath.join(table_path, parent)
        with contextlib.suppress(OSError):  # another job's directory may be in it
            remove_empty_dir(filesystem, path)
    return kept
