"""Carrying out a :class:`~spark_output.commit.plan.CommitPlan`'s moves, and undoing them.

Every function here is idempotent, because recovery may run it again after a crash at
any point: a move already made is not made twice, one not made is not undone.
On a local filesystem no move, undo or check follows a symbolic link (:class:`PlanPaths`,
:mod:`hcat_notify.safe_move`).
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import stat
from collections.abc import Collection, Mapping, Sequence

from pyarrow import fs as pafs

from hcat_notify import (
    Catalog,
    InvalidInputError,
    NewPartition,
    PartitionSpec,
    UnsafeDeleteError,
    UnsafeMoveError,
    move_below,
    remove_empty_below,
    remove_tree,
    stat_below,
    validate_job_id,
)
from hcat_notify.warehouse import location_key
from spark_output.commit.plan import CommitPlan, MoveKind, PartitionMove
from spark_output.fs import TableLocation, crc_sidecar, exists, move, remove_empty_dir

__all__ = [
    "STAGING_DIR",
    "TRASH_DIR",
    "PlanPaths",
    "apply_moves",
    "cleanup_job",
    "held_by_others",
    "job_dir_problem",
    "moves_done",
    "new_partitions",
    "remove_job_dirs",
    "remove_unheld_job_dirs",
    "undo_moves",
]

logger = logging.getLogger(__name__)

STAGING_DIR = "_hcat_staging"  # hidden from readers: the name starts with "_"
TRASH_DIR = "_hcat_trash"


class PlanPaths:
    """A plan's paths on its filesystem: what is there, moves, empty-directory removals.

    On a local filesystem each step reaches its directories from the outermost of
    ``bases`` that holds them, never through a symbolic link, and a path that is itself a
    link is refused (:mod:`hcat_notify.safe_move`, :class:`hcat_notify.UnsafeMoveError`);
    on HDFS and S3 (no links) it is pyarrow's, by path.
    """

    def __init__(self, filesystem: pafs.FileSystem, bases: Sequence[str]) -> None:
        self.filesystem = filesystem
        self.local = isinstance(filesystem, pafs.LocalFileSystem)
        self.bases = list(bases)

    def exists(self, path: str) -> bool:
        """Whether something is at ``path``.

        Raises:
            UnsafeMoveError: (local) ``path``, or a component of it, is a link.
        """
        if not self.local:
            return exists(self.filesystem, path)
        found = stat_below(path, self.bases)
        if found is not None and stat.S_ISLNK(found.st_mode):
            raise UnsafeMoveError(
                f"{path} is a symbolic link; nothing is moved through or as a link"
            )
        return found is not None

    def inode(self, path: str) -> int | None:
        """The inode of the directory at ``path`` (local only; else None)."""
        if not self.local:
            return None
        found = stat_below(path, self.bases)
        return None if found is None or not stat.S_ISDIR(found.st_mode) else found.st_ino

    def move(self, source: str, target: str, *, inode: int | None = None) -> None:
        """Rename ``source`` to ``target``, creating the target's parent (locally:
        :func:`hcat_notify.safe_move.move_below`, ``source`` being ``inode`` if given)."""
        if self.local:
            move_below(source, target, self.bases, inode=inode)
        else:
            move(self.filesystem, source, target)

    def remove_empty_dir(self, directory: str) -> bool:
        """:func:`spark_output.fs.remove_empty_dir`, locally without following a link."""
        if self.local:
            return remove_empty_below(directory, self.bases)
        return remove_empty_dir(self.filesystem, directory)


def _plan_paths(filesystem: pafs.FileSystem, plan: CommitPlan, bases: Sequence[str]) -> PlanPaths:
    return PlanPaths(filesystem, [*bases, plan.table_path])


def apply_moves(
    filesystem: pafs.FileSystem, plan: CommitPlan, *, bases: Sequence[str] = ()
) -> None:
    """Perform the plan's moves; on failure undo what was done and re-raise.

    Args:
        filesystem: the table's.
        plan: the journalled plan.
        bases: trusted directories beside the plan's table (:class:`PlanPaths`): the
            local warehouse roots (:func:`hcat_notify.warehouse_bases`), and for the
            committer the registered locations outside the table it appends to.

    Raises:
        UnsafeMoveError: (local) a path runs through a symbolic link, or a directory is
            not the one the job staged: nothing further is moved.
    """
    paths = _plan_paths(filesystem, plan, bases)
    try:
        for entry in plan.partitions:
            if entry.kind is MoveKind.DIR:
                if entry.trash is not None and paths.exists(entry.final):
                    paths.move(entry.final, entry.trash)
                paths.move(entry.staged, entry.final, inode=entry.staged_inode)
            elif not (entry.whole_dir and _rename_new_dir(paths, entry)):
                for file in entry.files:
                    paths.move(file.source, file.target)
    except Exception as exc:
        try:
            undo_moves(filesystem, plan, bases=bases)
        except UnsafeMoveError as refused:  # the caller's undo meets it again
            exc.add_note(f"undoing the moves was refused: {refused}")
        raise


def _rename_new_dir(paths: PlanPaths, entry: PartitionMove) -> bool:
    # One rename instead of one per file; False when a concurrent append to the same
    # partition created ``final`` meanwhile: then the files are moved one by one, next to
    # that writer's. A rename onto a non-empty directory fails; onto an empty one (a
    # writer that created it and is about to move its files in) it replaces it, and that
    # writer's moves, made by path, land in this directory.
    if paths.exists(entry.final):
        return False
    try:
        paths.move(entry.staged, entry.final)
    except OSError:
        if paths.exists(entry.staged) and paths.exists(entry.final):
            return False
        raise
    return True


def moves_done(filesystem: pafs.FileSystem, plan: CommitPlan, *, bases: Sequence[str] = ()) -> bool:
    """Whether every move of ``plan`` was made (a directory move: the directory at its
    target is the one the job staged, when the plan journalled its inode).

    Raises:
        UnsafeMoveError: (local) a path runs through a symbolic link.
    """
    paths = _plan_paths(filesystem, plan, bases)
    for entry in plan.partitions:
        if entry.kind is MoveKind.DIR:
            done = not paths.exists(entry.staged) and paths.exists(entry.final)
            if done and entry.staged_inode is not None and paths.local:
                done = paths.inode(entry.final) == entry.staged_inode
        else:
            done = all(
                not paths.exists(file.source) and paths.exists(file.target) for file in entry.files
            )
        if not done:
            return False
    return True


def undo_moves(filesystem: pafs.FileSystem, plan: CommitPlan, *, bases: Sequence[str] = ()) -> None:
    """Put back whatever moves of ``plan`` were made (``bases``: :func:`apply_moves`).

    A partition whose undo would move through a symbolic link, or move back a directory
    that is not the one the job staged, is left as it is; the others are undone.

    Raises:
        UnsafeMoveError: naming what was left, once every other partition is undone.
    """
    paths = _plan_paths(filesystem, plan, bases)
    refused: list[str] = []
    for entry in reversed(plan.partitions):
        try:
            _undo(paths, entry)
        except UnsafeMoveError as exc:
            logger.warning("did not undo partition %s: %s", entry.spec, exc)
            refused.append(str(exc))
    if refused:
        raise UnsafeMoveError("; ".join(refused))


def _undo(paths: PlanPaths, entry: PartitionMove) -> None:
    if entry.kind is MoveKind.DIR:
        if not paths.exists(entry.staged) and paths.exists(entry.final):
            paths.move(entry.final, entry.staged, inode=entry.staged_inode)
        if entry.trash and paths.exists(entry.trash) and not paths.exists(entry.final):
            paths.move(entry.trash, entry.final)
        return
    for file in reversed(entry.files):
        if not paths.exists(file.source) and paths.exists(file.target):
            paths.move(file.target, file.source)
        if entry.whole_dir and paths.exists(crc_sidecar(file.target)):
            # A directory renamed whole brought the files' checksum sidecars along.
            paths.move(crc_sidecar(file.target), crc_sidecar(file.source))
    if entry.new_dir:
        paths.remove_empty_dir(entry.final)


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


def held_by_others(
    catalog: Catalog,
    table: str,
    directories: Mapping[str, str],
    *,
    job_dirs: Collection[str] = (),
    table_location: str | None = None,
) -> list[tuple[str, str]]:
    """``(directory, its other user)`` for each of ``directories`` (a location → the
    partition spec it is for) that another table or partition holds: its registered
    location is the directory, lies inside or contains it
    (:meth:`hcat_notify.store.TablesView.location_holders`). For those of ``job_dirs``
    (a job's staging and trash inside ``table_location``), one at or around
    ``table_location`` does not count: it contains the table's own data as well.
    ``table`` itself, and its partition at that spec, do not count."""
    holders = catalog.tables.location_holders(list(directories), table=table)
    return [
        (directory, str(use))
        for directory, uses in holders.items()
        for use in uses
        if not (use.table == table and use.partition in (None, directories[directory]))
        and not (
            table_location is not None
            and directory in job_dirs
            and _contains(use.location, table_location)
        )
    ]


def _contains(location: str, table_location: str) -> bool:
    """Whether ``location`` is ``table_location`` or contains it."""
    return location_key(table_location).within(location_key(location))


def cleanup_job(
    catalog: Catalog,
    table: str,
    location: TableLocation,
    plan: CommitPlan,
) -> list[str]:
    """Delete the job's staging and trash (:func:`remove_job_dirs`) once its write is
    over (:func:`remove_unheld_job_dirs`), keeping the trash, as every purge would, also
    when another table or partition holds what it replaced (registered at a replaced
    partition's directory). What is kept is logged and returned, one line each.
    """
    replaced = {location.uri_of(move.final): move.spec for move in plan.partitions if move.trash}
    return remove_unheld_job_dirs(
        catalog, table, location, plan.staging, plan.trash, replaced=replaced
    )


def remove_unheld_job_dirs(
    catalog: Catalog,
    table: str,
    location: TableLocation,
    staging: str,
    trash: str,
    *,
    replaced: Mapping[str, str] | None = None,
) -> list[str]:
    """Delete a job's ``staging`` and ``trash`` (:func:`remove_job_dirs`), each unless
    another table or partition holds it (:func:`held_by_others`: registered at it, inside
    it or around it, unless at or around the table's location; for the trash also at,
    inside or around one of ``replaced``, a location → its partition spec, which the trash
    now holds): that one is kept, as every purge keeps it. One holder query for both.
    What is kept is logged and returned, one line each.
    """
    staging_uri, trash_uri = location.uri_of(staging), location.uri_of(trash)
    directories = {staging_uri: "", trash_uri: "", **(replaced or {})}
    # One at or around the table's location (a catalog's overlap from before the check)
    # holds none of the job's files; one between it and them (at or inside
    # <table>/_hcat_trash, say) holds them as much as one inside them.
    held = held_by_others(
        catalog, table, directories, job_dirs=(staging_uri, trash_uri), table_location=location.uri
    )
    kept: list[str] = []
    removed: list[str] = []
    for directory, is_staging in ((staging, True), (trash, False)):
        # the staging's own holders; the trash's, and those of what it replaced
        uses = [f"{at} is used by {use}" for at, use in held if (at == staging_uri) is is_staging]
        if uses:
            logger.warning("kept %s: %s", directory, "; ".join(uses))
            kept += [f"{directory}: {line}" for line in uses]
        else:
            removed.append(directory)
    return kept + remove_job_dirs(location.fs, location.path, *removed)
