"""spark_output: the PySpark side of hcat-notify.

``write_partitions`` writes a DataFrame into the dynamic partitions of a registered
table through a job-level committer, and announces exactly what it committed;
``send_mark_set_done`` announces that a set of partitions is complete.

Names are loaded on first use (PEP 562): ``import spark_output`` loads neither PySpark
nor pyarrow until a function that needs them is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports
from spark_output.errors import (
    CommitError,
    PartitionColumnsError,
    SparkOutputError,
    TooManyPartitionsError,
    WriteFailedError,
)

if TYPE_CHECKING:
    from hcat_notify import send_mark_set_done
    from spark_output.committer import CommitHooks, Recovery, recover
    from spark_output.compaction import CompactionError, CompactionPolicy, IntegrityError
    from spark_output.maintenance import (
        CompactionSummary,
        PurgeSummary,
        compact_table,
        purge_superseded,
    )
    from spark_output.writer import CommitResult, create_table, write_partitions

__all__ = [
    "CommitError",
    "CommitHooks",
    "CommitResult",
    "CompactionError",
    "CompactionPolicy",
    "CompactionSummary",
    "IntegrityError",
    "PartitionColumnsError",
    "PurgeSummary",
    "Recovery",
    "SparkOutputError",
    "TooManyPartitionsError",
    "WriteFailedError",
    "compact_table",
    "create_table",
    "purge_superseded",
    "recover",
    "send_mark_set_done",
    "write_partitions",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "send_mark_set_done": "hcat_notify",
        "CommitHooks": "spark_output.committer",
        "Recovery": "spark_output.committer",
        "recover": "spark_output.committer",
        "CompactionError": "spark_output.compaction",
        "CompactionPolicy": "spark_output.compaction",
        "IntegrityError": "spark_output.compaction",
        "CompactionSummary": "spark_output.maintenance",
        "PurgeSummary": "spark_output.maintenance",
        "compact_table": "spark_output.maintenance",
        "purge_superseded": "spark_output.maintenance",
        "CommitResult": "spark_output.writer",
        "create_table": "spark_output.writer",
        "write_partitions": "spark_output.writer",
    },
)
