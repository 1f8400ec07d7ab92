"""spark_output: the PySpark side of hcat-notify.

``write_partitions`` writes a DataFrame into the dynamic partitions of a registered
table through a job-level committer, and announces exactly what it committed;
``send_mark_set_done`` announces that a set of partitions is complete.
"""

from hcat_notify.writer import send_mark_set_done
from spark_output.committer import CommitHooks, Recovery, recover
from spark_output.compaction import CompactionError, CompactionPolicy, IntegrityError
from spark_output.errors import (
    CommitError,
    PartitionColumnsError,
    SparkOutputError,
    TooManyPartitionsError,
    WriteFailedError,
)
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
