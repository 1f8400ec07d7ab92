"""When and how to compact a partition: :class:`CompactionPolicy`, plain configuration.

What carries it out is elsewhere: :func:`~spark_output.compaction.partition.compact_partition`
for one directory, :mod:`~spark_output.compaction.staged` for the committer's staged
partitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from spark_output.errors import CompactionError

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "CompactionMode",
    "CompactionPolicy",
    "HasSize",
]

CompactionMode = Literal["merge", "har"]

DEFAULT_BLOCK_BYTES = 128 * 1024 * 1024
"""One HDFS block (128 MiB): the default small-file threshold and merge target."""


class HasSize(Protocol):
    """Anything with a ``size`` in bytes (:class:`spark_output.fs.FileStat`)."""

    @property
    def size(self) -> int: ...


_F = TypeVar("_F", bound=HasSize)


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how to compact a partition.

    A partition *triggers* when it holds at least ``min_files`` data files each smaller
    than ``small_file_bytes`` — HCatalog's rule, "enough files under one block". Files at
    or above ``small_file_bytes`` neither count towards the trigger nor prevent it, and
    the merge leaves them as they are (rewriting them would cost I/O and gain nothing);
    the HAR mode archives them with the rest, because the partition's location moves
    into the archive. ``target_file_bytes`` bounds the merged files (by the size of the
    inputs that go into each). ``mode`` picks the merge (Parquet/ORC) or a Hadoop
    Archive (any format).

    Raises:
        CompactionError: a field is not a positive int, ``min_files`` is below 2, or
            ``mode`` is neither ``merge`` nor ``har``.
    """

    min_files: int = 10
    small_file_bytes: int = DEFAULT_BLOCK_BYTES
    target_file_bytes: int = DEFAULT_BLOCK_BYTES
    mode: CompactionMode = "merge"

    def __post_init__(self) -> None:
        for name in ("min_files", "small_file_bytes", "target_file_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CompactionError(f"CompactionPolicy.{name} must be an int, got {value!r}")
        if self.min_files < 2:
            raise CompactionError(
                f"CompactionPolicy.min_files must be at least 2, got {self.min_files}"
            )
        if self.small_file_bytes <= 0:
            raise CompactionError(
                f"CompactionPolicy.small_file_bytes must be positive, got {self.small_file_bytes}"
            )
        if self.target_file_bytes <= 0:
            raise CompactionError(
                f"CompactionPolicy.target_file_bytes must be positive, got {self.target_file_bytes}"
            )
        if self.mode not in ("merge", "har"):
            raise CompactionError(
                f"CompactionPolicy.mode must be 'merge' or 'har', got {self.mode!r}"
            )

    def small_files(self, files: Sequence[_F]) -> list[_F]:
        """The files smaller than ``small_file_bytes``, in the given order."""
        return [f for f in files if f.size < self.small_file_bytes]

    def triggers(self, files: Sequence[HasSize]) -> bool:
        """Whether a partition holding ``files`` should be compacted (see the class doc).

        ``files`` are the partition's data files (hidden files excluded), as
        :func:`spark_output.fs.list_data_files` lists them; anything with a ``size``
        will do."""
        return len(self.small_files(files)) >= self.min_files
