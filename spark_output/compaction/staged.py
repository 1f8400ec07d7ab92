"""The committer's compaction hook: compact a staged partition if its policy triggers.

:class:`~spark_output.commit.committer.PartitionCommitter` calls it (through
``write_partitions``) on each partition Spark staged, before publication; the result
says which files the partition holds now.
"""

from __future__ import annotations

import dataclasses
from dataclasses import Field
from typing import Any, ClassVar, Protocol, TypeVar

from pyarrow import fs as pafs

from spark_output.compaction.partition import compact_partition
from spark_output.compaction.policy import CompactionPolicy
from spark_output.fs import list_data_files

__all__ = ["StagedLike", "compact_staged"]


class StagedLike(Protocol):
    """A staged partition as the hook uses it: a dataclass with ``directory`` and
    ``files`` fields (:class:`spark_output.commit.committer.StagedPartition`)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def directory(self) -> str: ...


_S = TypeVar("_S", bound=StagedLike)


def compact_staged(
    fs: pafs.FileSystem, staged: _S, *, policy: CompactionPolicy, storage_format: str
) -> _S:
    """Compact one staged partition if ``policy`` triggers.

    Returns ``staged`` unchanged when the policy does not trigger, else a copy whose
    ``files`` are the directory's data files after compaction (none after a HAR; the
    archive is ``<directory>/_hcat_archive.har`` and the partition's location, once the
    directory is in its final place, is
    :func:`spark_output.compaction.har.har_location` of its location).

    Raises:
        CompactionError: the partition could not be compacted (it is unchanged).
    """
    result = compact_partition(fs, staged.directory, policy=policy, storage_format=storage_format)
    if result is None or not result.changed:
        return staged
    return dataclasses.replace(staged, files=list_data_files(fs, staged.directory))
