"""Crashes and pauses injected into the commit protocol's named steps, for the tests.

Each patches a step of :class:`~spark_output.commit.committer.PartitionCommitter`, for
every committer, while its ``with`` block runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from spark_output.commit.committer import PartitionCommitter
from spark_output.commit.plan import CommitPlan


class SimulatedCrash(BaseException):
    """Not an Exception: the committer does not clean up, as when the process dies."""


@contextlib.contextmanager
def crash_before_moves() -> Iterator[None]:
    """The process dies once the plan is journalled, before any file moves."""

    def crash(self: PartitionCommitter, plan: CommitPlan) -> None:
        raise SimulatedCrash(self.job_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PartitionCommitter, "move", crash)
        yield


@contextlib.contextmanager
def crash_after_moves() -> Iterator[None]:
    """The process dies between the moves and the database commit (nothing is undone)."""
    move = PartitionCommitter.move

    def move_then_crash(self: PartitionCommitter, plan: CommitPlan) -> None:
        move(self, plan)
        raise SimulatedCrash(self.job_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PartitionCommitter, "move", move_then_crash)
        yield


@contextlib.contextmanager
def pause_after_staging(pause: Callable[[], object]) -> Iterator[None]:
    """``pause()`` runs once Spark has staged a job's output, before its commit starts."""
    commit = PartitionCommitter.commit

    def paused(self: PartitionCommitter, **kwargs: Any) -> Any:
        pause()
        return commit(self, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PartitionCommitter, "commit", paused)
        yield


def commit_together(jobs: Sequence[Callable[[], object]], *, timeout: float = 300) -> None:
    """Run each job (a write) in a thread of its own: each waits once Spark has staged
    its output until every job has, then all commit at once."""
    barrier = threading.Barrier(len(jobs), timeout=timeout)
    threads = [threading.Thread(target=job) for job in jobs]
    with pause_after_staging(barrier.wait):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
