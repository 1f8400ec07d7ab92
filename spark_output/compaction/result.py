"""What compacting one partition did: :class:`PartitionCompaction`, shared by both modes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_output.compaction.policy import CompactionMode

__all__ = ["PartitionCompaction"]


@dataclass(frozen=True)
class PartitionCompaction:
    """What compacting one partition did.

    ``files_*``/``bytes_*`` count data files (for HAR, "after" counts the part files);
    ``rows``/``checksum`` are those verified (None when not computed). ``new_location``
    is set when the partition's location changes (HAR: the ``har://`` URI).
    ``new_files`` are the names of the files written into the directory (for HAR, the
    part files inside the archive).
    """

    directory: str
    mode: CompactionMode
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    rows: int | None
    checksum: int | None
    seconds: float
    new_location: str | None = None
    manifest_path: str | None = None
    new_files: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """False when there was nothing to compact and the directory was left alone."""
        return self.manifest_path is not None
