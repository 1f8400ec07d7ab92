"""The library of compaction steps: compacting one partition directory, through pyarrow.fs.

The committer runs it on a staged partition before publication
(:mod:`~spark_output.compaction.staged`); the ``compact`` command
(:mod:`spark_output.maintenance.table_compaction`) on a copy of each registered
partition of a table. Where each part lives:

* :mod:`~spark_output.compaction.policy` — :class:`CompactionPolicy`: when a partition
  is worth compacting, and in which mode (plain configuration);
* :mod:`~spark_output.compaction.partition` — :func:`compact_partition`: one directory,
  in the policy's mode;
* :mod:`~spark_output.compaction.staged` — :func:`compact_staged`: the committer's hook;
* :mod:`~spark_output.compaction.merge` — rewrite small Parquet/ORC files into few
  (rewrite, verify, publish), writing them as
  :mod:`~spark_output.compaction.rewrite_format` says;
* :mod:`~spark_output.compaction.har` — pack a partition into a Hadoop Archive (a
  package: codec, index format, locations, reader, writer, the partition operation);
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
    from spark_output.compaction.staged import compact_staged

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
    "compact_staged",
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
        "compact_staged": "spark_output.compaction.staged",
    },
)
