"""The job-level output committer: staged output → table location → catalog, all or nothing.

Spark's own task commit writes the files into a hidden staging directory of the table;
:class:`PartitionCommitter` then finds the partitions there, compacts them if asked,
journals its :class:`~spark_output.commit.plan.CommitPlan`, moves the output into place
and registers and announces it in one database transaction. The protocol, step by step,
and what each failure leaves behind are described in docs/spark-writes.md.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyarrow import fs as pafs

from hcat_notify import (
    AnnounceMode,
    Catalog,
    CommitRecord,
    ConcurrentWriteError,
    JournalState,
    PartitionSpec,
    TableInfo,
    UnsafeMoveError,
    Warehouse,
    WriteMode,
    staging_entry_id,
    validate_job_id,
    warehouse_bases,
)
from spark_output.commit.moves import (
    STAGING_DIR,
    TRASH_DIR,
    PlanPaths,
    apply_moves,
    cleanup_job,
    new_partitions,
    remove_unheld_job_dirs,
    undo_moves,
)
from spark_output.commit.plan import CommitPlan, FileMove, MoveKind, Owner, PartitionMove
from spark_output.commit.recovery import writing
from spark_output.compaction.har.locations import ARCHIVE_NAME, har_location
from spark_output.compaction.har.reader import list_har
from spark_output.compaction.manifest import MANIFEST_NAME
from spark_output.errors import CommitError, TooManyPartitionsError
from spark_output.fs import FileStat, TableLocation, exists, is_hidden, list_data_files

__all__ = [
    "STAGING_DIR",
    "CompactHook",
    "PartitionCommitter",
    "StagedPartition",
    "staging_entry_id",
]

logger = logging.getLogger(__name__)


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


CompactHook = Callable[[pafs.FileSystem, StagedPartition], StagedPartition]
"""Run on each staged partition before publication; returns it as it now is."""


class PartitionCommitter:
    """Publishes one job's staged output into a table.

    Args:
        catalog: the open catalog.
        table: the table written.
        job_id: unique per write; re-running a committed job id is a no-op. One path
            component (:func:`hcat_notify.model.names.validate_job_id`).
        mode: ``append`` or ``overwrite``.
        create_table: the definition (``hcat_notify``'s journal ``table_definition``) of a
            table that is not registered yet: the commit registers it, with its
            CREATE_TABLE, in the transaction that registers the partitions (an import).
    """

    def __init__(
        self,
        catalog: Catalog,
        table: TableInfo,
        *,
        job_id: str,
        mode: WriteMode | str,
        create_table: Mapping[str, Any] | None = None,
    ) -> None:
        self.catalog = catalog
        self.create_table = create_table
        validate_job_id(job_id)  # it names directories: refused before anything is written
        self.table = table
        self.job_id = job_id
        self.mode = WriteMode(mode)
        self.location = TableLocation.parse(table.location)
        self.fs: pafs.FileSystem = self.location.fs
        self.staging = self.location.join(STAGING_DIR, job_id)
        self.trash = self.location.join(TRASH_DIR, job_id)
        # Trusted directories its local moves start from (moves.PlanPaths): the roots
        # (the table's location, inside one, is then checked component by component).
        self.bases = warehouse_bases(Warehouse.of(catalog.settings).roots)
        self.paths = PlanPaths(self.fs, [*self.bases, self.location.path])

    @property
    def staging_uri(self) -> str:
        return self.location.uri_of(self.staging)

    def check_staging_free(self) -> None:
        """Refuse, before Spark writes, a job id whose staging directory exists: another
        writer with the same job id is filling it (or one died doing so), and the cleanup
        of this write's failure would delete its files.

        Raises:
            ConcurrentWriteError: naming the directory; nothing was written.
            hcat_notify.UnsafeMoveError: (local) the staging directory, or a directory on
                its way below the warehouse root or the table's location, is a symbolic
                link (never followed); nothing was written.
        """
        try:
            taken = self.paths.exists(self.staging)
        except UnsafeMoveError as exc:
            raise UnsafeMoveError(
                f"cannot write to {self.table.name}: {str(exc).partition('; nothing')[0]}; "
                "nothing was written"
            ) from exc
        if taken:
            raise ConcurrentWriteError(
                f"job {self.job_id} is writing to {self.table.name} already: its staging "
                f"directory {self.staging} exists (if that writer is gone, 'hcat-notify "
                "recover --force' removes what it journalled); nothing was written"
            )

    # -- 1-2: discover ---------------------------------------------------------------------

    def discover(self, *, max_partitions: int) -> list[StagedPartition]:
        """The partitions Spark wrote into staging, in table key order.

        Raises:
            TooManyPartitionsError: more than ``max_partitions``.
            CommitError: a directory that is not ``key=value`` of the table's keys.
            hcat_notify.UnsafeMoveError: (local) a staged directory is, or is reached
                through, a symbolic link.
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
                self.paths.exists(info.path)  # (local) refuses a link: compaction deletes
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
        self,
        staged: Sequence[StagedPartition],
        *,
        mark_set_done: Mapping[str, str | None] | None,
        announce: AnnounceMode | None = None,
    ) -> CommitPlan:
        """The moves that publish ``staged``: what the journal records.

        Raises:
            CommitError: an append to a partition that lives in a Hadoop Archive (its
                files would not be visible through the archive).
        """
        registered = (
            {}
            if self.create_table is not None
            else {
                path: info.location
                for path, info in self.catalog.partitions.at(
                    self.table.name, [item.spec for item in staged]
                ).items()
            }
        )
        return CommitPlan(
            owner=Owner.current(),
            staging=self.staging,
            trash=self.trash,
            table_path=self.location.path,
            table_uri=self.location.uri,
            partitions=tuple(
                self._plan_partition(item, registered.get(item.spec.to_path())) for item in staged
            ),
            mark_set_done=dict(mark_set_done) if mark_set_done is not None else None,
            announce=announce,
        )

    def _plan_partition(self, item: StagedPartition, current: str | None) -> PartitionMove:
        spec = item.spec.to_path()
        final = self.location.join(spec)
        if self.mode is WriteMode.APPEND and current is not None:
            final = self._append_target(item, current, final)
        move = PartitionMove(
            spec=spec,
            staged=item.directory,
            final=final,
            file_count=item.file_count,
            bytes=item.total_bytes,
            kind=MoveKind.DIR,
            archived=item.archived,
            # Readers reach an archived partition through Hadoop's HarFileSystem.
            location=har_location(self.location.uri_of(final)) if item.archived else None,
        )
        if current is not None:  # an existing partition: its INSERT lists the new files
            names = [ARCHIVE_NAME] if item.archived else [stat.name for stat in item.files]
            move = dataclasses.replace(move, added=tuple(names))
        if self.mode is WriteMode.OVERWRITE or item.archived:
            # Swap the whole directory: readers see the old or the new partition.
            return dataclasses.replace(
                move,
                trash=self.location.join(TRASH_DIR, self.job_id, spec),
                staged_inode=self.paths.inode(item.directory),
            )
        # File by file, so that a concurrent append to the same partition (allowed) never
        # collides with this one. A partition that does not exist yet is renamed whole if
        # it still does not at move time (every file lands at the same target): only on a
        # local filesystem, where a rename onto a non-empty directory fails (HDFS would
        # nest the directory inside it).
        new_dir = not exists(self.fs, final)
        whole_dir = new_dir and isinstance(self.fs, pafs.LocalFileSystem)
        files = [
            FileMove(stat.path, self._target(final, stat.path, new_dir)) for stat in item.files
        ]
        if move.added:
            move = dataclasses.replace(
                move, added=tuple(posixpath.basename(file.target) for file in files)
            )
        # The compaction audit record travels with the files, named per job; for a
        # whole-directory rename it is named so in staging first (once: a second plan of
        # the same staging finds it renamed), so that the rename puts it at its target.
        stem = MANIFEST_NAME.removesuffix(".json")
        name = f"{stem}-{self.job_id}.json"
        manifest = posixpath.join(item.directory, MANIFEST_NAME)
        renamed = posixpath.join(item.directory, name)
        if whole_dir and exists(self.fs, manifest):
            self.paths.move(manifest, renamed)
        for source in (manifest, renamed):
            if exists(self.fs, source):
                files.append(FileMove(source, posixpath.join(final, name)))
                break
        return dataclasses.replace(
            move, kind=MoveKind.FILES, new_dir=new_dir, whole_dir=whole_dir, files=tuple(files)
        )

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

    def _target(self, final: str, source: str, new_dir: bool) -> str:
        # Spark's part-file names carry a UUID; if one is taken anyway, add the job id.
        # (In a partition that does not exist yet none is: no need to look.)
        name = posixpath.basename(source)
        target = posixpath.join(final, name)
        if new_dir or not exists(self.fs, target):
            return target
        stem, dot, ext = name.partition(".")
        return posixpath.join(final, f"{stem}-{self.job_id}{dot}{ext}")

    # -- the whole protocol ----------------------------------------------------------------------

    def commit(
        self,
        *,
        started_at: datetime,
        max_partitions: int,
        mark_set_done: Mapping[str, str | None] | None,
        compact: CompactHook | None,
        phases: dict[str, float],
        archives: bool = False,
        announce: AnnounceMode | None = None,
    ) -> tuple[CommitRecord, CommitPlan]:
        """Steps 1-7 on output already staged by Spark; returns the record and the plan."""
        with writing(self.job_id):
            clock = time.monotonic()
            staged = self.discover(max_partitions=max_partitions)
            phases["discover"] = time.monotonic() - clock
            if compact is not None:
                clock = time.monotonic()
                staged = [self._compact(compact, item, archives) for item in staged]
                phases["compact"] = time.monotonic() - clock
            clock = time.monotonic()
            plan = self.plan(staged, mark_set_done=mark_set_done, announce=announce)
            self.catalog.commits.begin(
                self.job_id,
                self.table.name,
                mode=self.mode,
                partitions=plan.specs,
                plan=plan.to_json(),
                started_at=started_at,
                create_table=self.create_table,
            )
            phases["journal"] = time.monotonic() - clock
            try:
                clock = time.monotonic()
                self.move(plan)
                phases["move"] = time.monotonic() - clock
                clock = time.monotonic()
                record = self.catalog.commits.complete(
                    self.job_id,
                    new_partitions(plan, self.location),
                    mark_set_done=mark_set_done,
                    announce=announce,
                )
                phases["register"] = time.monotonic() - clock
            except Exception as exc:
                # Not committed: put every file back where it was and close the entry.
                try:
                    undo_moves(self.fs, plan, bases=self.move_bases(plan))
                except UnsafeMoveError as refused:
                    # What cannot be put back without following a link stays, with the
                    # entry pending, the staging and the trash: `recover` reports it.
                    raise UnsafeMoveError(
                        f"{exc}; undoing the write was refused too, and it stays pending "
                        f"(hcat-notify recover reports it): {refused}"
                    ) from exc
                self.catalog.commits.abort(self.job_id, reason=f"{type(exc).__name__}: {exc}")
                self.cleanup()
                raise
            clock = time.monotonic()
            self.cleanup(plan)
            phases["cleanup"] = time.monotonic() - clock
            return record, plan

    def move(self, plan: CommitPlan) -> None:
        """Step 5: carry out the journalled plan's moves (the files are in place, not yet
        registered: a crash from here on is rolled forward by recovery)."""
        apply_moves(self.fs, plan, bases=self.move_bases(plan))

    def move_bases(self, plan: CommitPlan) -> list[str]:
        """The trusted directories of the plan's local moves (:class:`PlanPaths`): the
        warehouse roots, and the registered locations outside the table that it appends
        to (read from the registry when it was planned; inside a root, that root is the
        base)."""
        outside = [
            move.final
            for move in plan.partitions
            if not move.final.startswith(self.location.path.rstrip("/") + "/")
        ]
        return [*self.bases, *outside]

    def _compact(
        self,
        compact: CompactHook,
        item: StagedPartition,
        archives: bool,
    ) -> StagedPartition:
        final = self.location.join(item.spec.to_path())
        if archives and self.mode is WriteMode.APPEND and exists(self.fs, final):
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

    # -- staging filled by this process ---------------------------------------------------

    def journal_staging(self, *, started_at: datetime) -> None:
        """Journal the staging directory before this process puts files in it itself (an
        import copies them; Spark's own task commit is not covered): should the process
        die before :meth:`commit` journals its plan, ``recover`` finds the staging
        through this entry and removes it. Claims no partition. Close the entry with
        :meth:`end_staging` once the commit is over, whatever its outcome; call both
        within :func:`~spark_output.commit.recovery.writing` of
        :func:`staging_entry_id`, so that recovery in this process leaves it alone.

        Raises:
            hcat_notify.InvalidInputError: the entry exists already, or the new table's
                location is another table's.
        """
        plan = CommitPlan(
            owner=Owner.current(),
            staging=self.staging,
            trash=self.trash,
            table_path=self.location.path,
            table_uri=self.location.uri,
            partitions=(),
            stages_for=self.job_id,
        )
        self.catalog.commits.begin(
            staging_entry_id(self.job_id),
            self.table.name,
            mode=WriteMode.APPEND,
            partitions=[],
            plan=plan.to_json(),
            started_at=started_at,
            create_table=self.create_table,
        )

    def end_staging(self, reason: str) -> None:
        """Close the entry of :meth:`journal_staging` (the staging is gone, or the job's
        own journal entry answers for it now)."""
        self.catalog.commits.abort(staging_entry_id(self.job_id), reason=reason)

    def cleanup_unless_pending(self) -> None:
        """After a failed commit: :meth:`cleanup`, unless the job's journal entry is still
        pending (its undo was refused: recovery answers for the staging and the trash)."""
        entry = self.catalog.commits.get(self.job_id)
        if entry is None or entry.state is not JournalState.PENDING:
            self.cleanup()

    def cleanup(self, committed: CommitPlan | None = None) -> None:
        """Remove this job's staging and trash directories, each only if no other table
        holds it (:func:`~spark_output.commit.moves.remove_unheld_job_dirs`); once
        ``committed``, the trash also only if none holds what it replaced
        (:func:`~spark_output.commit.moves.cleanup_job`)."""
        if committed is not None:
            cleanup_job(self.catalog, str(self.table.name), self.location, committed)
        else:
            remove_unheld_job_dirs(
                self.catalog, str(self.table.name), self.location, self.staging, self.trash
            )
