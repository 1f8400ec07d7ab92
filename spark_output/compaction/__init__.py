"""Small-file compaction of one partition directory, through pyarrow.fs.

The committer runs it on a staged partition before publication; maintenance
(:mod:`spark_output.maintenance`) on a copy of a registered partition. Where each part
lives:

* :mod:`~spark_output.compaction.policy` — :class:`CompactionPolicy`: when a partition
  is worth compacting, and in which mode;
* :mod:`~spark_output.compaction.partition` — :func:`compact_partition`: one directory,
  in the policy's mode;
* :mod:`~spark_output.compaction.merge` — rewrite small Parquet/ORC files into few;
* :mod:`~spark_output.compaction.har` — pack a partition into a Hadoop Archive;
* :mod:`~spark_output.compaction.checksum` and :mod:`~spark_output.compaction.read` —
  verify that a merge kept every row;
* :mod:`~spark_output.compaction.manifest` — the audit record ``_hcat_compaction.json``;
* :mod:`~spark_output.compaction.result` — :class:`PartitionCompaction`, what was done.

The design (why copies, why verification before deletion, the HAR format) is in
docs/compaction.md. Names are loaded on first use, like the package's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports
from spark_output.errors import CompactionError, HarError, VerificationError

if TYPE_CHECKING:
    from spark_output.compaction.checksum import compute_checksum
    from spark_output.compaction.har import archive_partition
    from spark_output.compaction.manifest import MANIFEST_NAME
    from spark_output.compaction.merge import merge_partition
    from spark_output.compaction.partition import compact_partition
    from spark_output.compaction.policy import (
        DEFAULT_BLOCK_BYTES,
        CompactionMode,
        CompactionPolicy,
    )
    from spark_output.compaction.result import PartitionCompaction

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "MANIFEST_NAME",
    "CompactionError",
    "CompactionMode",
    "CompactionPolicy",
    "HarError",
    "PartitionCompaction",
    "VerificationError",
    "archive_partition",
    "compact_partition",
    "compute_checksum",
    "merge_partition",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "compute_checksum": "spark_output.compaction.checksum",
        "archive_partition": "spark_output.compaction.har",
        "MANIFEST_NAME": "spark_output.compaction.manifest",
        "merge_partition": "spark_output.compaction.merge",
        "compact_partition": "spark_output.compaction.partition",
        "DEFAULT_BLOCK_BYTES": "spark_output.compaction.policy",
        "CompactionMode": "spark_output.compaction.policy",
        "CompactionPolicy": "spark_output.compaction.policy",
        "PartitionCompaction": "spark_output.compaction.result",
    },
)
