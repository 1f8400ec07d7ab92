"""Maintenance of registered partitions: compaction, and purging what it superseded.

* :mod:`~spark_output.maintenance.table_compaction` — :func:`compact_table`: run
  :mod:`spark_output.compaction` on a copy of each registered partition, then switch
  its registered location by compare-and-set;
* :mod:`~spark_output.maintenance.purge` — :func:`purge_superseded`: delete the old
  directories once no reader can need them;
* :mod:`~spark_output.maintenance.marker` — the superseded marker that links the two.

The design is described in docs/compaction.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from spark_output.maintenance.marker import SUPERSEDED_MARKER
    from spark_output.maintenance.purge import (
        DEFAULT_PURGE_AGE,
        PurgeResult,
        PurgeSummary,
        purge_superseded,
    )
    from spark_output.maintenance.table_compaction import (
        COMPACTED_DIR,
        CompactionSummary,
        PartitionPlan,
        PartitionResult,
        ProgressCallback,
        compact_table,
    )

__all__ = [
    "COMPACTED_DIR",
    "DEFAULT_PURGE_AGE",
    "SUPERSEDED_MARKER",
    "CompactionSummary",
    "PartitionPlan",
    "PartitionResult",
    "ProgressCallback",
    "PurgeResult",
    "PurgeSummary",
    "compact_table",
    "purge_superseded",
]

_COMPACT = "spark_output.maintenance.table_compaction"
_PURGE = "spark_output.maintenance.purge"

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "COMPACTED_DIR": _COMPACT,
        "CompactionSummary": _COMPACT,
        "PartitionPlan": _COMPACT,
        "PartitionResult": _COMPACT,
        "ProgressCallback": _COMPACT,
        "compact_table": _COMPACT,
        "SUPERSEDED_MARKER": "spark_output.maintenance.marker",
        "DEFAULT_PURGE_AGE": _PURGE,
        "PurgeResult": _PURGE,
        "PurgeSummary": _PURGE,
        "purge_superseded": _PURGE,
    },
)
