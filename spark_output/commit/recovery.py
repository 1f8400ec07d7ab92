"""Recovery: finish or undo the writes a crashed job left pending in the journal.

A pending write whose moves all completed is rolled forward (registered and announced);
any other is rolled back (moves undone, nothing announced). A write whose process is
still alive is left alone: this module also keeps the set of jobs committing in this
process (:func:`writing`), so that recovery in the same process never touches them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from hcat_notify import Catalog, CommitRecord, JournalEntry, JournalState
from spark_output.commit.moves import moves_done, new_partitions, remove_job_dirs, undo_moves
from spark_output.commit.plan import CommitPlan
from spark_output.fs import TableLocation

__all__ = [
    "DEFAULT_STALE_AFTER",
    "Recovery",
    "RecoveryAction",
    "is_abandoned",
    "recover",
    "writing",
]

logger = logging.getLogger(__name__)

DEFAULT_STALE_AFTER = timedelta(hours=1)
"""A pending entry of another host counts as abandoned after this long."""

# Jobs committing in this process: their pending entries are not abandoned.
_ACTIVE_JOBS: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


class RecoveryAction(StrEnum):
    """What :func:`recover` did with one pending write."""

    ROLLED_FORWARD = "rolled forward"
    ROLLED_BACK = "rolled back"
    SKIPPED = "skipped (writer alive)"


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` did with one pending write (``record`` when rolled forward)."""

    job_id: str
    table: str
    action: RecoveryAction
    record: CommitRecord | None = None


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
    """Whether a pending journal entry's writer is gone (so recovery may touch it)."""
    owner = CommitPlan.from_json(entry.plan).owner
    if owner.host == socket.gethostname():
        if owner.pid == os.getpid():
            with _ACTIVE_LOCK:
                return entry.job_id not in _ACTIVE_JOBS
        return not _pid_alive(owner.pid)
    return now - entry.started_at > stale_after


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
    process is still alive are left alone unless ``force``.

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
    for entry in catalog.commits.pending(table):
        if not force and not is_abandoned(entry, now=now, stale_after=stale_after):
            outcomes.append(Recovery(entry.job_id, str(entry.table), RecoveryAction.SKIPPED))
            continue
        plan = CommitPlan.from_json(entry.plan)
        location = TableLocation.parse(plan.table_uri)
        filesystem = location.fs
        if plan.stages_for is not None:
            job = catalog.commits.get(plan.stages_for)
            if job is None or job.state is not JournalState.PENDING:
                # Never journalled: the staging is all the job left. Closed: what is left
                # is what its cleanup did not get to.
                remove_job_dirs(filesystem, location.path, plan.staging, plan.trash)
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
        if all(moves_done(filesystem, item) for item in plan.partitions):
            record = catalog.commits.complete(
                entry.job_id,
                new_partitions(plan, location),
                mark_set_done=plan.mark_set_done,
                announce=plan.announce,
            )
            action = RecoveryAction.ROLLED_FORWARD
        else:
            undo_moves(filesystem, plan)
            catalog.commits.abort(entry.job_id, reason="rolled back by recovery")
            action = RecoveryAction.ROLLED_BACK
        remove_job_dirs(filesystem, location.path, plan.staging, plan.trash)
        logger.warning("recovered job=%s table=%s: %s", entry.job_id, entry.table, action)
        outcomes.append(Recovery(entry.job_id, str(entry.table), action, record))
    return outcomes
