"""Exceptions raised by spark_output.

Every error spark_output raises on purpose derives from :class:`SparkOutputError`.
Catalog problems (unknown table, bad spec, a concurrent overwrite) come from
hcat_notify and keep their own types (:class:`hcat_notify.HcatNotifyError`).

    SparkOutputError
    ├── PartitionColumnsError    partition_by / DataFrame columns do not match the table
    ├── TooManyPartitionsError   a write produced more partitions than max_partitions
    ├── WriteFailedError         the Spark job failed; nothing was changed
    └── CommitError              moving or registering the output failed; rolled back
"""

from __future__ import annotations

__all__ = [
    "CommitError",
    "PartitionColumnsError",
    "SparkOutputError",
    "TooManyPartitionsError",
    "WriteFailedError",
]


class SparkOutputError(Exception):
    """Root of every error spark_output raises on purpose."""


class PartitionColumnsError(SparkOutputError, ValueError):
    """partition_by or the DataFrame's columns do not match the table's partition keys."""


class TooManyPartitionsError(SparkOutputError):
    """The write produced more partitions than ``max_partitions``; nothing is visible."""


class WriteFailedError(SparkOutputError):
    """The Spark job writing the staged output failed; the table is unchanged."""


class CommitError(SparkOutputError):
    """Publishing the staged output failed; completed moves were undone."""
