"""Recovery: finish or undo the writes a crashed job left pending in the journal.

A pending write whose moves all completed is rolled forward (registered and announced);
any other is rolled back (moves undone, nothing announced). A write whose process is
still alive is left alone: this module also keeps the set of jobs committing in this
process (:func:`writing`), so that recovery in the same process never touches them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pyarrow import fs as pafs

from hcat_notify import (
    Catalog,
    CommitRecord,
    InvalidInputError,
    JournalEntry,
    JournalState,
    PartitionSpec,
    TableNotFoundError,
    UnsafeMoveError,
    Warehouse,
    staging_entry_id,
    validate_job_id,
    warehouse_bases,
)
from spark_output.commit.moves import (
    STAGING_DIR,
    TRASH_DIR,
    cleanup_job,
    held_by_others,
    moves_done,
    new_partitions,
    undo_moves,
)
from spark_output.commit.plan import CommitPlan, MoveKind, PartitionMove
from spark_output.fs import TableLocation

__all__ = [
    "DEFAULT_STALE_AFTER",
    "Recovery",
    "RecoveryAction",
    "is_abandoned",
    "plan_problem",
    "recover",
    "writing",
]

logger = logging.getLogger(__name__)

DEFAULT_STALE_AFTER = timedelta(hours=1)
"""A pending entry of another host counts as abandoned after this long (not a staging
entry: :func:`is_abandoned`)."""

# Jobs committing in this process: their pending entries are not abandoned.
_ACTIVE_JOBS: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


class RecoveryAction(StrEnum):
    """What :func:`recover` did with one pending write."""

    ROLLED_FORWARD = "rolled forward"
    ROLLED_BACK = "rolled back"
    SKIPPED = "skipped (writer alive)"
    REFUSED = "refused (left pending)"
    """Its plan names paths that are not the job's (:func:`plan_problem`): nothing done."""


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` did with one pending write (``record`` when rolled forward,
    ``reason`` when refused)."""

    job_id: str
    table: str
    action: RecoveryAction
    record: CommitRecord | None = None
    reason: str = ""


@contextmanager
def writing(job_id: str) -> Iterator[None]:
    """Mark ``job_id`` as committing in this process for the duration of the block."""
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
    """Whether a pending journal entry's writer is gone (so recovery may touch it). A
    staging entry of another host never is (its job may fill the staging for hours, a
    Spark job: only ``force`` takes it)."""
    plan = CommitPlan.from_json(entry.plan)
    owner = plan.owner
    if owner.host == socket.gethostname():
        if owner.pid == os.getpid():
            with _ACTIVE_LOCK:
                return entry.job_id not in _ACTIVE_JOBS
        return not _pid_alive(owner.pid)
    return plan.stages_for is None and now - entry.started_at > stale_after


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
    announced. The staging of a job that died filling it (an import copying files,
    :attr:`CommitPlan.stages_for`) before it journalled its plan is removed. Writes whose
    process is still alive are left alone unless ``force``. Before anything is touched,
    each plan is checked against the registry (:func:`plan_problem`); one that fails is
    left pending and reported ``refused``, with why.

    Args:
        catalog: the open catalog.
        table: ``db.table``, or None for every table.
        force: also recover writes whose process seems alive.
        stale_after: how long a write of another host may stay pending before it
            counts as abandoned.

    Returns:
        One :class:`Recovery` per pending write, oldest first.

    Raises:
        hcat_notify.TableNotFoundError: ``table`` is not registered.
    """
    outcomes: list[Recovery] = []
    now = datetime.now(UTC)
    bases = warehouse_bases(Warehouse.of(catalog.settings).roots)
    for entry in catalog.commits.pending(table):
        try:
            alive = not force and not is_abandoned(entry, now=now, stale_after=stale_after)
        except (KeyError, TypeError, ValueError):
            alive = False  # an unreadable plan: refused below
        if alive:
            outcomes.append(Recovery(entry.job_id, str(entry.table), RecoveryAction.SKIPPED))
            continue
        try:
            plan = CommitPlan.from_json(entry.plan)
            location, problem = _checked_location(catalog, entry, plan)
        except (KeyError, TypeError, ValueError) as exc:
            location, problem = None, f"unreadable plan: {type(exc).__name__}: {exc}"
        if location is None:
            logger.warning(
                "recovery refused job=%s table=%s: %s", entry.job_id, entry.table, problem
            )
            outcomes.append(
                Recovery(entry.job_id, str(entry.table), RecoveryAction.REFUSED, reason=problem)
            )
            continue
        filesystem = location.fs
        if plan.stages_for is not None:
            job = catalog.commits.get(plan.stages_for)
            if job is None or job.state is not JournalState.PENDING:
                # Never journalled: the staging is all the job left. Closed: what is left
                # is what its cleanup did not get to (its trash kept if another table
                # holds what it replaced).
                cleanup_job(catalog, str(entry.table), location, _replaced(plan, job))
            # else the job's own entry (recovered next: it is younger) owns the staging
            catalog.commits.abort(entry.job_id, reason="staging closed by recovery")
            if job is None:
                logger.warning(
                    "recovered job=%s table=%s: staging removed", entry.job_id, entry.table
                )
                outcomes.append(
                    Recovery(entry.job_id, str(entry.table), RecoveryAction.ROLLED_BACK)
                )
            continue
        record: CommitRecord | None = None
        try:  # from the roots, never through a link (a check above may be raced)
            done = moves_done(filesystem, plan, bases=bases)
            if not done:
                undo_moves(filesystem, plan, bases=bases)
        except UnsafeMoveError as exc:
            logger.warning("recovery refused job=%s table=%s: %s", entry.job_id, entry.table, exc)
            outcomes.append(
                Recovery(entry.job_id, str(entry.table), RecoveryAction.REFUSED, reason=str(exc))
            )
            continue
        if done:
            record = catalog.commits.complete(
                entry.job_id,
                new_partitions(plan, location),
                mark_set_done=plan.mark_set_done,
                announce=plan.announce,
            )
            action = RecoveryAction.ROLLED_FORWARD
        else:
            catalog.commits.abort(entry.job_id, reason="rolled back by recovery")
            action = RecoveryAction.ROLLED_BACK
        cleanup_job(catalog, str(entry.table), location, plan)
        logger.warning("recovered job=%s table=%s: %s", entry.job_id, entry.table, action)
        outcomes.append(Recovery(entry.job_id, str(entry.table), action, record))
    return outcomes


def _replaced(plan: CommitPlan, job: JournalEntry | None) -> CommitPlan:
    """A staging entry's plan with the partitions its job's plan replaced (for the holder
    check of :func:`cleanup_job`; nothing is moved by it)."""
    if job is None:
        return plan
    try:
        moved = CommitPlan.from_json(job.plan).partitions
    except (KeyError, TypeError, ValueError):
        moved = ()
    return dataclasses.replace(plan, partitions=moved)


def _checked_location(
    catalog: Catalog, entry: JournalEntry, plan: CommitPlan
) -> tuple[TableLocation | None, str]:
    """The table's location as registered (or as the entry registers it), when the plan
    passes :func:`plan_problem`, names no directory another table or partition holds and
    runs through no link; else (None, why)."""
    try:
        specs = [PartitionSpec.parse(_claimed_spec(spec)) for spec in entry.partitions]
    except InvalidInputError as exc:
        return None, str(exc)
    try:
        info = catalog.get_table(entry.table)
    except TableNotFoundError:
        definition = entry.table_definition
        if definition is None:
            return None, f"table {entry.table} is not registered, and the entry registers none"
        try:  # the registry may have changed since the entry was journalled
            catalog.commits.check_new_table(entry.table, definition)
        except InvalidInputError as exc:
            return None, f"the table it registers is refused now: {exc}"
        location = str(definition["location"])
        managed = definition.get("table_type", "MANAGED_TABLE") != "EXTERNAL_TABLE"
        registered: dict[str, str] = {}
        creates = True
    else:
        location, managed = info.location, info.table_type != "EXTERNAL_TABLE"
        creates = False
        registered = {
            spec: partition.location
            for spec, partition in catalog.partitions.at(info.name, specs).items()
        }
    try:
        root = TableLocation.parse(location)
    except (OSError, ValueError) as exc:
        return None, f"cannot use the table's location {location!r}: {exc}"
    warehouse = Warehouse.of(catalog.settings)
    if not warehouse.contains(root.uri):  # an external table's too: recovery moves and
        # deletes only inside the roots (a writer's own cleanup is not recovery's)
        return None, f"the table's location {location} is outside the warehouse roots"
    if creates and any(move.kind is MoveKind.DIR for move in plan.partitions):
        return None, "it registers its table, yet moves whole directories (an import moves files)"
    problem = (
        plan_problem(entry, plan, root, registered, managed=managed, warehouse=warehouse)
        or _held_problem(catalog, entry, plan, root)
        or _link_problem(plan, root)
    )
    return (root, "") if problem is None else (None, problem)


def _claimed_spec(spec: str) -> str:
    """``spec`` when it is a partition's path spec as written (:meth:`PartitionSpec.to_path`).

    Raises:
        InvalidInputError: it is not.
    """
    try:
        PartitionSpec.parse_written(spec)
    except ValueError as exc:
        raise InvalidInputError(
            f"it claims {spec!r}, which is not a partition spec: {exc}"
        ) from None
    return spec


def plan_problem(
    entry: JournalEntry,
    plan: CommitPlan,
    root: TableLocation,
    registered: Mapping[str, str],
    *,
    managed: bool = True,
    warehouse: Warehouse | None = None,
) -> str | None:
    """Why recovery must not act on ``plan``, or None: every path it names must be the
    job's own (docs/spark-writes.md, "Recovery"). ``root`` is the table's registered
    location, ``registered`` its registered partitions' locations by spec, ``managed``
    its kind; a file-by-file append may target a partition's registered location, inside
    ``root`` (external table) or inside ``warehouse``'s roots (managed)."""
    job = entry.job_id
    if plan.stages_for is not None:
        if entry.job_id != staging_entry_id(plan.stages_for):
            return f"it stages for job {plan.stages_for!r}, whose staging entry it is not"
        job = plan.stages_for
    try:
        validate_job_id(job)
        written = TableLocation.parse(plan.table_uri)
        for spec in entry.partitions:
            _claimed_spec(spec)
    except (InvalidInputError, OSError, ValueError) as exc:
        return str(exc)
    if (
        type(written.fs) is not type(root.fs)
        or written.path != root.path
        or plan.table_path != root.path
    ):
        return f"its table {plan.table_uri} is not the table's location {root.uri}"
    for what, named, expected in (
        ("staging", plan.staging, root.join(STAGING_DIR, job)),
        ("trash", plan.trash, root.join(TRASH_DIR, job)),
    ):
        if named != expected:
            return f"its {what} {named} is not {expected}"
    for move in plan.partitions:
        problem = _move_problem(entry, plan, move, root, registered) or _target_problem(
            move, root, registered, managed=managed, warehouse=warehouse
        )
        if problem is not None:
            return f"partition {move.spec}: {problem}"
    return None


def _move_problem(
    entry: JournalEntry,
    plan: CommitPlan,
    move: PartitionMove,
    root: TableLocation,
    registered: Mapping[str, str],
) -> str | None:
    if move.spec not in entry.partitions:
        return "the entry does not claim it"
    for path in _move_paths(move):
        if not _well_formed(path):
            return f"the path {path!r} has an empty, '.' or '..' component"
    if not _strictly_under(move.staged, plan.staging):
        return f"its staged directory {move.staged} is not in {plan.staging}"
    if move.kind is MoveKind.DIR and move.trash is None:  # the committer gives each one
        return "it moves a whole directory without a trash to put back"
    if move.trash is not None and move.trash != posixpath.join(plan.trash, move.spec):
        return f"its trash {move.trash} is not {posixpath.join(plan.trash, move.spec)}"
    for file in move.files:
        if not _strictly_under(file.source, plan.staging):
            return f"the file {file.source} is not in {plan.staging}"
        if posixpath.dirname(file.target) != move.final:
            return f"the file target {file.target} is not in {move.final}"
    return None


def _target_problem(
    move: PartitionMove,
    root: TableLocation,
    registered: Mapping[str, str],
    *,
    managed: bool,
    warehouse: Warehouse | None,
) -> str | None:
    """A directory move (swap, whole: undone by moving the target away) may only target
    ``<table>/<spec>`` (an archived append: also the partition's registered location
    inside the table's); a file-by-file append also the partition's registered location,
    if that lies inside the table's location (external) or the roots (managed)."""
    own = root.join(move.spec)
    if move.final == own:
        return None
    current = registered.get(move.spec)
    archive = move.kind is MoveKind.DIR and move.archived
    if (move.kind is MoveKind.DIR and not archive) or current is None or current.startswith("har:"):
        return f"its target {move.final} is not {own}"
    try:
        where = TableLocation.parse(current).path
    except (OSError, ValueError):
        where = None
    if move.final != where:
        return f"its target {move.final} is neither {own} nor its registered location"
    if archive and not _strictly_under(move.final, root.path):
        # an append archived into a partition compaction moved (inside the table)
        return f"its target {move.final} is outside the table's location {root.path}"
    if managed:
        if warehouse is None or not warehouse.contains(root.uri_of(move.final)):
            return f"its target {move.final} is outside the warehouse roots"
    elif not _strictly_under(move.final, root.path):
        return f"its target {move.final} is outside the table's location {root.path}"
    return None


def _held_problem(
    catalog: Catalog, entry: JournalEntry, plan: CommitPlan, root: TableLocation
) -> str | None:
    """Why a target of ``plan`` is not the job's: another table or partition holds it (is
    it, lies inside or contains it: :func:`held_by_others`)."""
    targets = {root.uri_of(move.final): move for move in plan.partitions}
    specs = {target: move.spec for target, move in targets.items()}
    for target, use in held_by_others(catalog, str(entry.table), specs):
        move = targets[target]
        return f"partition {move.spec}: its target {move.final} is used by {use}"
    return None


def _link_problem(plan: CommitPlan, root: TableLocation) -> str | None:
    """Why recovery would move through a link: a component of a path the plan names,
    below the table's location (or, for a registered location outside it, anywhere), is
    a symbolic link now. Local tables only."""
    if not isinstance(root.fs, pafs.LocalFileSystem):
        return None
    base = root.path.rstrip("/")
    real_base = os.path.realpath(base)
    paths = [plan.staging, plan.trash]
    for move in plan.partitions:
        paths += _move_paths(move)
    for path in paths:
        inside = path.startswith(base + "/")
        expected = real_base + path[len(base) :] if inside else posixpath.normpath(path)
        if os.path.realpath(path) != expected:
            return f"the path {path} runs through a symbolic link; recovery never follows one"
    return None


def _move_paths(move: PartitionMove) -> list[str]:
    paths = [move.staged, move.final, *([move.trash] if move.trash else [])]
    for file in move.files:
        paths += [file.source, file.target]
    return paths


def _well_formed(path: str) -> bool:
    """No empty, ``.`` or ``..`` component (a leading ``/`` aside)."""
    parts = path.split("/")
    if path.startswith("/"):
        parts = parts[1:]
    return all(part not in ("", ".", "..") for part in parts)


def _strictly_under(path: str, directory: str) -> bool:
    return ".." not in path.split("/") and path.startswith(directory.rstrip("/") + "/")
