"""The job-level output committer: staged output → table location → catalog, all or nothing.

Spark's own task commit writes the files into a hidden staging directory of the table.
This committer then

1. finds the partitions written there (decoding the escaped directory names),
2. refuses more than ``max_partitions``,
3. runs the compaction hook on the staged partitions,
4. records a journal entry in the catalog (the partitions it claims, the moves it makes),
5. moves the output into place — append adds files to existing partitions under names
   that never clobber; overwrite swaps exactly the partitions written, nothing else,
6. registers the partitions, their ADD_PARTITION events and the MARK_SET_DONE (if
   asked) and closes the journal entry, in one database transaction,
7. removes the staging directory and what overwrite replaced.

A failure before step 6 undoes the moves and leaves no rows and no events. A crash
between 5 and 6 leaves a pending journal entry that :func:`recover` rolls forward (all
moves done: register and announce) or back (undo the moves).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyarrow import fs as pafs

from hcat_notify import Catalog, CommitRecord, JournalEntry, NewPartition, PartitionSpec, TableInfo
from spark_output.compaction import MANIFEST_NAME
from spark_output.errors import CommitError, TooManyPartitionsError
from spark_output.fs import FileStat, TableLocation, exists, is_hidden, list_data_files, move
from spark_output.har import ARCHIVE_NAME, har_location, list_har

__all__ = [
    "STAGING_DIR",
    "CommitHooks",
    "PartitionCommitter",
    "Recovery",
    "StagedPartition",
    "is_abandoned",
    "recover",
    "undo_moves",
]

logger = logging.getLogger(__name__)

STAGING_DIR = "_hcat_staging"  # hidden from readers: the name starts with "_"
TRASH_DIR = "_hcat_trash"
# A pending entry of another host counts as abandoned after this long.
DEFAULT_STALE_AFTER = timedelta(hours=1)

# Jobs committing in this process: their pending entries are not abandoned.
_ACTIVE_JOBS: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class CommitHooks:
    """Test seams of the commit protocol; each gets the job id. Default: none.

    ``after_moves`` runs between the moves and the database commit: a hook that raises
    a ``BaseException`` which is not an ``Exception`` simulates a crash there (nothing
    is undone, as when the process dies).
    """

    after_stage: Callable[[str], None] | None = None
    after_journal: Callable[[str], None] | None = None
    after_moves: Callable[[str], None] | None = None


@dataclass
class StagedPartition:
    """A partition found in the staging directory."""

    spec: PartitionSpec
    directory: str
    files: list[FileStat] = field(default_factory=list)
    # Set when compaction packed the files into a Hadoop Archive inside the directory.
    archived_files: int = 0
    archived_bytes: int = 0

    @property
    def archived(self) -> bool:
        return self.archived_files > 0

    @property
    def file_count(self) -> int:
        return self.archived_files if self.archived else len(self.files)

    @property
    def total_bytes(self) -> int:
        return self.archived_bytes if self.archived else sum(stat.size for stat in self.files)


@contextmanager
def _active(job_id: str) -> Iterator[None]:
    with _ACTIVE_LOCK:
        _ACTIVE_JOBS.add(job_id)
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE_JOBS.discard(job_id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_abandoned(
    entry: JournalEntry, *, now: datetime, stale_after: timedelta = DEFAULT_STALE_AFTER
) -> bool:
    """Whether a pending journal entry's writer is gone (so recovery may touch it)."""
    owner = entry.plan.get("owner", {})
    if owner.get("host") == socket.gethostname():
        pid = int(owner.get("pid", -1))
        if pid == os.getpid():
            with _ACTIVE_LOCK:
                return entry.job_id not in _ACTIVE_JOBS
        return not _pid_alive(pid)
    return now - entry.started_at > stale_after


class PartitionCommitter:
    """Publishes one job's staged output into a table.

    Args:
        catalog: the open catalog.
        table: the table written.
        job_id: unique per write; re-running a committed job id is a no-op.
        mode: ``append`` or ``overwrite``.
        hooks: test seams.
    """

    def __init__(
        self,
        catalog: Catalog,
        table: TableInfo,
        *,
        job_id: str,
        mode: str,
        hooks: CommitHooks | None = None,
    ) -> None:
        self.catalog = catalog
        self.table = table
        self.job_id = job_id
        self.mode = mode
        self.hooks = hooks or CommitHooks()
        self.location = TableLocation.parse(table.location)
        self.fs: pafs.FileSystem = self.location.fs
        self.staging = self.location.join(STAGING_DIR, job_id)
        self.trash = self.location.join(TRASH_DIR, job_id)

    @property
    def staging_uri(self) -> str:
        return self.location.uri_of(self.staging)

    # -- 1-2: discover ---------------------------------------------------------------------

    def discover(self, *, max_partitions: int) -> list[StagedPartition]:
        """The partitions Spark wrote into staging, in table key order.

        Raises:
            TooManyPartitionsError: more than ``max_partitions``.
            CommitError: a directory that is not ``key=value`` of the table's keys.
        """
        keys = self.table.partition_keys
        found: list[StagedPartition] = []
        frontier = [(self.staging, 0)]
        while frontier:
            directory, depth = frontier.pop()
            infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
            for info in infos:
                if info.type != pafs.FileType.Directory or is_hidden(info.base_name):
                    continue
                if depth + 1 < len(keys):
                    frontier.append((info.path, depth + 1))
                else:
                    relative = posixpath.relpath(info.path, self.staging)
                    try:
                        spec = PartitionSpec.parse(relative).for_table(keys, partial=False)
                    except Exception as exc:
                        raise CommitError(
                            f"unexpected directory {relative} in the staged output: {exc}"
                        ) from exc
                    found.append(
                        StagedPartition(spec, info.path, list_data_files(self.fs, info.path))
                    )
                    if len(found) > max_partitions:
                        raise TooManyPartitionsError(
                            f"the write to {self.table.name} produced more than {max_partitions} "
                            f"partitions (max_partitions={max_partitions}; Hive's "
                            "hive.exec.max.dynamic.partitions default is 1000); nothing was "
                            "published"
                        )
        found.sort(key=lambda staged: staged.spec.to_path())
        return found

    # -- 4: plan -----------------------------------------------------------------------------

    def plan(
        self, staged: Sequence[StagedPartition], *, mark_set_done: Mapping[str, str | None] | None
    ) -> dict[str, Any]:
        """The moves that publish ``staged``: what the journal records.

        Raises:
            CommitError: an append to a partition that lives in a Hadoop Archive (its
                files would not be visible through the archive).
        """
        registered = {
            path: info.location
            for path, info in self.catalog.partitions_at(
                self.table.name, [item.spec for item in staged]
            ).items()
        }
        partitions = []
        for item in staged:
            final = self.location.join(item.spec.to_path())
            current = registered.get(item.spec.to_path())
            if self.mode == "append" and current is not None:
                final = self._append_target(item, current, final)
            entry: dict[str, Any] = {
                "spec": item.spec.to_path(),
                "staged": item.directory,
                "final": final,
                "file_count": item.file_count,
                "bytes": item.total_bytes,
                "archived": item.archived,
            }
            if item.archived:
                # Readers reach the partition through Hadoop's HarFileSystem.
                entry["location"] = har_location(self.location.uri_of(final))
            if self.mode == "overwrite" or item.archived:
                # Swap the whole directory: readers see the old or the new partition.
                entry["kind"] = "dir"
                entry["trash"] = self.location.join(TRASH_DIR, self.job_id, item.spec.to_path())
            else:
                # File by file, so that a concurrent append to the same partition (allowed)
                # never collides with this one.
                entry["kind"] = "files"
                entry["new_dir"] = not exists(self.fs, final)
                entry["files"] = [
                    [stat.path, self._free_name(final, stat.path)] for stat in item.files
                ]
                manifest = posixpath.join(item.directory, MANIFEST_NAME)
                if exists(self.fs, manifest):
                    # The compaction audit record travels with the files, named per job.
                    stem = MANIFEST_NAME.removesuffix(".json")
                    target = posixpath.join(final, f"{stem}-{self.job_id}.json")
                    entry["files"].append([manifest, target])
            partitions.append(entry)
        return {
            "owner": {"host": socket.gethostname(), "pid": os.getpid()},
            "staging": self.staging,
            "trash": self.trash,
            "table_path": self.location.path,
            "table_uri": self.location.uri,
            "partitions": partitions,
            "mark_set_done": dict(mark_set_done) if mark_set_done is not None else None,
        }

    def _append_target(self, item: StagedPartition, current: str, default: str) -> str:
        # Maintenance compaction may have moved a partition: append where it lives now.
        if current.startswith("har:"):
            raise CommitError(
                f"partition {item.spec} of {self.table.name} is archived ({current}); files "
                "appended to it would not be visible through the archive: overwrite the "
                "partition instead; nothing was published"
            )
        try:
            where = TableLocation.parse(current)
        except (OSError, ValueError):
            return default
        if type(where.fs) is not type(self.fs):
            return default
        return where.path

    def _free_name(self, final: str, source: str) -> str:
        # Spark's part-file names carry a UUID; if one is taken anyway, add the job id.
        name = posixpath.basename(source)
        target = posixpath.join(final, name)
        if not exists(self.fs, target):
            return target
        stem, dot, ext = name.partition(".")
        return posixpath.join(final, f"{stem}-{self.job_id}{dot}{ext}")

    # -- 5: moves ------------------------------------------------------------------------------

    def move_into_place(self, plan: Mapping[str, Any]) -> None:
        """Perform the plan's moves; on failure undo what was done and re-raise."""
        try:
            for entry in plan["partitions"]:
                if entry["kind"] == "dir":
                    if exists(self.fs, entry["final"]):
                        move(self.fs, entry["final"], entry["trash"])
                    move(self.fs, entry["staged"], entry["final"])
                else:
                    for source, target in entry["files"]:
                        move(self.fs, source, target)
        except Exception:
            undo_moves(self.fs, plan)
            raise

    # -- the whole protocol ----------------------------------------------------------------------

    def commit(
        self,
        *,
        started_at: datetime,
        max_partitions: int,
        mark_set_done: Mapping[str, str | None] | None,
        compact: Callable[[pafs.FileSystem, StagedPartition], StagedPartition] | None,
        phases: dict[str, float],
        archives: bool = False,
    ) -> tuple[CommitRecord, Mapping[str, Any]]:
        """Steps 1-7 on output already staged by Spark; returns the record and the plan."""
        with _active(self.job_id):
            clock = time.monotonic()
            staged = self.discover(max_partitions=max_partitions)
            phases["discover"] = time.monotonic() - clock
            if compact is not None:
                clock = time.monotonic()
                staged = [self._compact(compact, item, archives) for item in staged]
                phases["compact"] = time.monotonic() - clock
            clock = time.monotonic()
            plan = self.plan(staged, mark_set_done=mark_set_done)
            self.catalog.commits.begin(
                self.job_id,
                self.table.name,
                mode=self.mode,
                partitions=[entry["spec"] for entry in plan["partitions"]],
                plan=plan,
                started_at=started_at,
            )
            phases["journal"] = time.monotonic() - clock
            try:
                if self.hooks.after_journal is not None:
                    self.hooks.after_journal(self.job_id)
                clock = time.monotonic()
                self.move_into_place(plan)
                phases["move"] = time.monotonic() - clock
                if self.hooks.after_moves is not None:
                    self.hooks.after_moves(self.job_id)
                clock = time.monotonic()
                record = self.catalog.commits.complete(
                    self.job_id,
                    _commit_partitions(plan, self.location),
                    mark_set_done=mark_set_done,
                )
                phases["register"] = time.monotonic() - clock
            except Exception as exc:
                # Not committed: put every file back where it was and close the entry.
                undo_moves(self.fs, plan)
                self.catalog.commits.abort(self.job_id, reason=f"{type(exc).__name__}: {exc}")
                self.cleanup()
                raise
            clock = time.monotonic()
            self.cleanup()
            phases["cleanup"] = time.monotonic() - clock
            return record, plan

    def _compact(
        self,
        compact: Callable[[pafs.FileSystem, StagedPartition], StagedPartition],
        item: StagedPartition,
        archives: bool,
    ) -> StagedPartition:
        final = self.location.join(item.spec.to_path())
        if archives and self.mode == "append" and exists(self.fs, final):
            # An existing partition keeps its location; appended files stay plain files.
            logger.info("not archiving %s: appending to an existing partition", item.spec)
            return item
        compacted = compact(self.fs, item)
        archive = posixpath.join(compacted.directory, ARCHIVE_NAME)
        if not exists(self.fs, archive):
            return compacted
        inside = [entry for entry in list_har(self.fs, archive) if not entry.is_dir]
        return dataclasses.replace(
            compacted,
            files=[],
            archived_files=len(inside),
            archived_bytes=sum(entry.length for entry in inside),
        )

    def cleanup(self) -> None:
        """Remove this job's staging and trash directories."""
        remove_job_dirs(self.fs, self.location.path, self.staging, self.trash)


def remove_job_dirs(filesystem: pafs.FileSystem, table_path: str, *directories: str) -> None:
    """Delete a job's staging/trash directories, and their parents once empty."""
    for directory in directories:
        try:
            if exists(filesystem, directory):
                filesystem.delete_dir(directory)
        except OSError as exc:  # leftovers are hidden from readers; say so and go on
            logger.warning("could not remove %s: %s", directory, exc)
    for parent in (STAGING_DIR, TRASH_DIR):
        path = posixpath.join(table_path, parent)
        with contextlib.suppress(OSError):
            if exists(filesystem, path) and not filesystem.get_file_info(pafs.FileSelector(path)):
                filesystem.delete_dir(path)


def _commit_partitions(plan: Mapping[str, Any], location: TableLocation) -> list[NewPartition]:
    return [
        NewPartition(
            spec=PartitionSpec.parse(entry["spec"]),
            location=entry.get("location") or location.uri_of(entry["final"]),
            file_count=int(entry["file_count"]),
            total_bytes=int(entry["bytes"]),
            archived=bool(entry.get("archived", False)),
        )
        for entry in plan["partitions"]
    ]


def _moves_done(filesystem: pafs.FileSystem, entry: Mapping[str, Any]) -> bool:
    if entry["kind"] == "dir":
        return not exists(filesystem, entry["staged"]) and exists(filesystem, entry["final"])
    return all(
        not exists(filesystem, source) and exists(filesystem, target)
        for source, target in entry["files"]
    )


def undo_moves(filesystem: pafs.FileSystem, plan: Mapping[str, Any]) -> None:
    """Put back whatever moves of ``plan`` were made (idempotent)."""
    for entry in reversed(plan["partitions"]):
        if entry["kind"] == "dir":
            if not exists(filesystem, entry["staged"]) and exists(filesystem, entry["final"]):
                move(filesystem, entry["final"], entry["staged"])
            if (
                entry.get("trash")
                and exists(filesystem, entry["trash"])
                and not exists(filesystem, entry["final"])
            ):
                move(filesystem, entry["trash"], entry["final"])
        else:
            for source, target in reversed(entry["files"]):
                if not exists(filesystem, source) and exists(filesystem, target):
                    move(filesystem, target, source)
            final = entry["final"]
            if (
                entry.get("new_dir")
                and exists(filesystem, final)
                and not filesystem.get_file_info(pafs.FileSelector(final))
            ):
                filesystem.delete_dir(final)


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` did with one pending write."""

    job_id: str
    table: str
    action: str  # "rolled forward", "rolled back", "skipped (writer alive)"
    record: CommitRecord | None = None


def recover(
    catalog: Catalog,
    table: str | None = None,
    *,
    force: bool = False,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
) -> list[Recovery]:
    """Roll pending writes forward or back so that files, registry and messages agree.

    A write whose moves all completed is rolled forward: its partitions are registered
    and announced. Any other is rolled back: its moves are undone and nothing is
    announced. Writes whose process is still alive are left alone unless ``force``.
    """
    outcomes: list[Recovery] = []
    now = datetime.now(UTC)
    for entry in catalog.commits.pending(table):
        if not force and not is_abandoned(entry, now=now, stale_after=stale_after):
            outcomes.append(Recovery(entry.job_id, str(entry.table), "skipped (writer alive)"))
            continue
        location = TableLocation.parse(str(entry.plan.get("table_uri") or entry.plan["table_path"]))
        filesystem = location.fs
        plan = entry.plan
        if all(_moves_done(filesystem, item) for item in plan["partitions"]):
            record = catalog.commits.complete(
                entry.job_id,
                _commit_partitions(plan, location),
                mark_set_done=plan.get("mark_set_done"),
            )
            action = "rolled forward"
        else:
            undo_moves(filesystem, plan)
            catalog.commits.abort(entry.job_id, reason="rolled back by recovery")
            record = None
            action = "rolled back"
        remove_job_dirs(filesystem, location.path, plan["staging"], plan["trash"])
        logger.warning("recovered job=%s table=%s: %s", entry.job_id, entry.table, action)
        outcomes.append(Recovery(entry.job_id, str(entry.table), action, record))
    return outcomes
