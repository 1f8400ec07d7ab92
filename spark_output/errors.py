"""Exceptions raised by spark_output.

Every error spark_output raises on purpose derives from :class:`SparkOutputError`.
Catalog problems (unknown table, bad spec, a concurrent overwrite) come from
hcat_notify and keep their own types (:class:`hcat_notify.HcatNotifyError`).

    SparkOutputError
    ├── InvalidArgumentError     a bad argument (mode=, max_partitions=, ...); nothing done
    ├── PartitionColumnsError    partition_by / DataFrame columns do not match the table
    ├── TooManyPartitionsError   a write produced more partitions than max_partitions
    ├── WriteFailedError         the Spark job failed; nothing was changed
    ├── CommitError              moving or registering the output failed; rolled back
    ├── SparkCatalogError        the Spark session's catalog cannot hold the table
    └── CompactionError          a partition could not be compacted; it is unchanged
        ├── VerificationError    rewritten files do not hold the original rows
        ├── HarError             a Hadoop Archive could not be written, read or verified
        └── PartitionDirectoryNotFoundError   a partition's directory does not exist
"""

from __future__ import annotations

__all__ = [
    "CommitError",
    "CompactionError",
    "HarError",
    "InvalidArgumentError",
    "PartitionColumnsError",
    "PartitionDirectoryNotFoundError",
    "SparkCatalogError",
    "SparkOutputError",
    "TooManyPartitionsError",
    "VerificationError",
    "WriteFailedError",
]


class SparkOutputError(Exception):
    """Root of every error spark_output raises on purpose."""


class InvalidArgumentError(SparkOutputError, ValueError):
    """An argument has a value the function does not accept; nothing was done."""


class PartitionColumnsError(SparkOutputError, ValueError):
    """partition_by or the DataFrame's columns do not match the table's partition keys."""


class TooManyPartitionsError(SparkOutputError):
    """The write produced more partitions than ``max_partitions``; nothing is visible."""


class WriteFailedError(SparkOutputError):
    """The Spark job writing the staged output failed; the table is unchanged."""


class CommitError(SparkOutputError):
    """Publishing the staged output failed; completed moves were undone."""


class SparkCatalogError(SparkOutputError):
    """The Spark session's catalog cannot hold the table (e.g. no Hive support)."""


class CompactionError(SparkOutputError):
    """A partition could not be compacted; the message names the partition directory."""


class VerificationError(CompactionError):
    """Rewritten files do not hold the same rows as the originals (originals kept)."""


class HarError(CompactionError):
    """A Hadoop Archive could not be written, read or verified; the message names it.

    A :class:`CompactionError`, so callers can handle both compaction modes alike."""


class PartitionDirectoryNotFoundError(CompactionError, FileNotFoundError):
    """A partition directory to list or compact does not exist."""
