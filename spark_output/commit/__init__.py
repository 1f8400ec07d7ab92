"""The job-level output committer and its recovery.

* :mod:`~spark_output.commit.plan` — :class:`CommitPlan`, the typed plan a write
  journals before it moves anything;
* :mod:`~spark_output.commit.committer` — :class:`PartitionCommitter`: staged output →
  table location → catalog, all or nothing;
* :mod:`~spark_output.commit.moves` — carrying out a plan's moves, and undoing them;
* :mod:`~spark_output.commit.recovery` — :func:`recover`: finish or undo the writes a
  crashed job left pending.

The protocol and its failure cases are described in docs/spark-writes.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from spark_output.commit.committer import PartitionCommitter, StagedPartition
    from spark_output.commit.plan import CommitPlan, MoveKind, PartitionMove
    from spark_output.commit.recovery import Recovery, RecoveryAction, recover

__all__ = [
    "CommitPlan",
    "MoveKind",
    "PartitionCommitter",
    "PartitionMove",
    "Recovery",
    "RecoveryAction",
    "StagedPartition",
    "recover",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "PartitionCommitter": "spark_output.commit.committer",
        "StagedPartition": "spark_output.commit.committer",
        "CommitPlan": "spark_output.commit.plan",
        "MoveKind": "spark_output.commit.plan",
        "PartitionMove": "spark_output.commit.plan",
        "Recovery": "spark_output.commit.recovery",
        "RecoveryAction": "spark_output.commit.recovery",
        "recover": "spark_output.commit.recovery",
    },
)
