"""Compact one partition directory in the mode its policy names (merge or HAR)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_output.compaction.har import archive_partition
from spark_output.compaction.merge import merge_partition
from spark_output.errors import CompactionError
from spark_output.fs import list_data_files

if TYPE_CHECKING:
    from pyarrow import fs as pafs

    from spark_output.compaction.policy import CompactionPolicy
    from spark_output.compaction.result import PartitionCompaction

__all__ = ["compact_partition"]


def compact_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    policy: CompactionPolicy,
    storage_format: str,
    force: bool = False,
) -> PartitionCompaction | None:
    """Compact one partition directory as ``policy`` says, if it triggers.

    Returns None (and touches nothing) when ``policy.triggers`` is False for the
    directory's data files, unless ``force``. Mode ``merge`` runs
    :func:`~spark_output.compaction.merge.merge_partition` (Parquet and ORC only); mode
    ``har`` runs :func:`~spark_output.compaction.har.archive_partition` (any format).

    Raises:
        CompactionError: ``merge`` of a format other than Parquet or ORC, a missing
            directory, or a failed compaction (the directory is unchanged).
    """
    if not force and not policy.triggers(list_data_files(fs, directory)):
        return None
    if policy.mode == "har":
        return archive_partition(fs, directory, policy=policy, storage_format=storage_format)
    if storage_format not in ("parquet", "orc"):
        raise CompactionError(
            f"cannot merge {storage_format} partition {directory}: merge mode supports "
            "parquet and orc; use mode='har'"
        )
    return merge_partition(fs, directory, storage_format=storage_format, policy=policy)
