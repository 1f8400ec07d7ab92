"""spark_output: the PySpark side of hcat-notify.

``write_partitions`` writes a DataFrame into the dynamic partitions of a registered
table through a job-level committer, and announces exactly what it committed;
``send_mark_set_done`` announces that a set of partitions is complete (``expect_sets``
gives a table a completeness rule, so that the catalog announces it); ``compact_table``
and ``purge_superseded`` maintain registered partitions. Where things live:

* :mod:`spark_output.writer` — ``write_partitions``, ``create_table``;
* :mod:`spark_output.commit` — the job-level committer, its journalled plan, recovery;
* :mod:`spark_output.compaction` — the steps that compact one partition directory
  (merge, HAR), used by the committer and by maintenance;
* :mod:`spark_output.maintenance` — ``compact_table`` and ``purge_superseded``: the
  commands that run compaction over a table's registered partitions and clean up after;
* :mod:`spark_output.registry` — ``register_partitions`` (files another tool wrote),
  ``drop_partitions``, ``drop_table``, with Spark's catalog in step;
* :mod:`spark_output.transfer` — ``export_table`` and ``import_table``;
* :mod:`spark_output.spark_catalog` — keeping Spark's catalog in step;
* :mod:`spark_output.fs` — locations and file listing; :mod:`spark_output.session` — a
  Spark session for one command; :mod:`spark_output.cli` — ``hcat-notify compact`` and
  ``recover``; :mod:`spark_output.errors` — the exception tree.

Names are loaded on first use (PEP 562): ``import spark_output`` loads neither PySpark
nor pyarrow until a function that needs them is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports
from spark_output.errors import (
    CommitError,
    CompactionError,
    HarError,
    InvalidArgumentError,
    PartitionColumnsError,
    SparkCatalogError,
    SparkOutputError,
    TooManyPartitionsError,
    VerificationError,
    WriteFailedError,
)

if TYPE_CHECKING:
    from hcat_notify import expect_sets, send_mark_set_done
    from spark_output.commit.recovery import Recovery, RecoveryAction, recover
    from spark_output.compaction.policy import CompactionPolicy
    from spark_output.maintenance.purge import PurgeSummary, purge_superseded
    from spark_output.maintenance.table_compaction import CompactionSummary, compact_table
    from spark_output.registry import DropResult, drop_partitions, drop_table, register_partitions
    from spark_output.writer import CommitResult, create_table, write_partitions

__all__ = [
    "CommitError",
    "CommitResult",
    "CompactionError",
    "CompactionPolicy",
    "CompactionSummary",
    "DropResult",
    "HarError",
    "InvalidArgumentError",
    "PartitionColumnsError",
    "PurgeSummary",
    "Recovery",
    "RecoveryAction",
    "SparkCatalogError",
    "SparkOutputError",
    "TooManyPartitionsError",
    "VerificationError",
    "WriteFailedError",
    "compact_table",
    "create_table",
    "drop_partitions",
    "drop_table",
    "expect_sets",
    "purge_superseded",
    "recover",
    "register_partitions",
    "send_mark_set_done",
    "write_partitions",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "expect_sets": "hcat_notify",
        "send_mark_set_done": "hcat_notify",
        "Recovery": "spark_output.commit.recovery",
        "RecoveryAction": "spark_output.commit.recovery",
        "recover": "spark_output.commit.recovery",
        "CompactionPolicy": "spark_output.compaction.policy",
        "CompactionSummary": "spark_output.maintenance.table_compaction",
        "compact_table": "spark_output.maintenance.table_compaction",
        "PurgeSummary": "spark_output.maintenance.purge",
        "purge_superseded": "spark_output.maintenance.purge",
        "DropResult": "spark_output.registry",
        "drop_partitions": "spark_output.registry",
        "drop_table": "spark_output.registry",
        "register_partitions": "spark_output.registry",
        "CommitResult": "spark_output.writer",
        "create_table": "spark_output.writer",
        "write_partitions": "spark_output.writer",
    },
)
