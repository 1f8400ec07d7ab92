"""``export_table``: copy a table's partitions and definition to a self-describing directory.

The files go to ``<to>/data/<spec>/...`` (hashed while they are copied, through
``pyarrow.fs``, so the destination may be HDFS or S3), then the manifest
``<to>/_hcat_export.json`` is written last: an export is complete exactly when its
manifest exists. A partition archived in a Hadoop Archive is exported as its archive.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyarrow import fs as pafs

from hcat_notify import (
    Catalog,
    InvalidInputError,
    PartitionInfo,
    PartitionSpec,
    TableLocation,
    list_data_files,
    storage_location,
)
from spark_output.transfer.manifest import (
    MANIFEST_NAME,
    ExportedFile,
    ExportedPartition,
    Manifest,
    copy_with_checksum,
)

__all__ = ["ExportSummary", "export_table"]

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_table` wrote."""

    table: str
    destination: str
    export_id: str
    partitions: int
    files: int
    bytes: int


def _no_progress(done: int, total: int, item: str) -> None:
    """Default progress callback: nothing shown."""


def _source_files(partition: PartitionInfo) -> tuple[TableLocation, list[tuple[str, str]]]:
    """The partition's directory and its files as (path on the filesystem, relative path)."""
    stored = storage_location(partition.location)
    if stored != partition.location:  # an archive: export the archive directory
        archive = TableLocation.parse(stored)
        selector = pafs.FileSelector(archive.path, recursive=True)
        files = [
            (
                info.path,
                posixpath.join(
                    posixpath.basename(archive.path), info.path[len(archive.path) + 1 :]
                ),
            )
            for info in archive.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]
        return archive, sorted(files, key=lambda item: item[1])
    where = TableLocation.parse(partition.location)
    return where, [(stat.path, stat.name) for stat in list_data_files(where.fs, where.path)]


def export_table(
    catalog: Catalog,
    table: str,
    spec: PartitionSpec | Mapping[str, str | None] | None = None,
    *,
    to: str,
    progress: Progress = _no_progress,
) -> ExportSummary:
    """Export a table's partitions (those matching ``spec``, else all) to ``to``.

    Raises:
        hcat_notify.TableNotFoundError: no such table.
        hcat_notify.InvalidInputError: ``to`` already holds an export, or cannot be used.
        OSError: a partition's files cannot be read or the destination written.
    """
    info = catalog.get_table(table)
    chosen = catalog.list_partitions(info.name, spec)
    try:
        destination = TableLocation.parse(to)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot export to {to!r}: {exc}") from exc
    manifest_path = destination.join(MANIFEST_NAME)
    if destination.fs.get_file_info(manifest_path).type != pafs.FileType.NotFound:
        raise InvalidInputError(f"{to} already holds an export ({MANIFEST_NAME}); nothing written")
    sources = [(partition, *_source_files(partition)) for partition in chosen]
    total = sum(len(files) for _, _, files in sources)
    done = 0
    exported = []
    for partition, where, files in sources:
        copied = []
        for path, relative in files:
            target = destination.join("data", partition.spec.to_path(), relative)
            size, digest = copy_with_checksum(where.fs, path, destination.fs, target)
            copied.append(ExportedFile(relative, size, digest))
            done += 1
            progress(done, total, f"{partition.spec}/{relative}")
        exported.append(
            ExportedPartition(partition.spec, partition.location, partition.archived, tuple(copied))
        )
    manifest = Manifest(
        export_id=uuid.uuid4().hex,
        exported_at=datetime.now(UTC).isoformat(timespec="seconds"),
        table=info.name,
        definition={
            "location": info.location,
            "storageFormat": info.storage_format,
            "tableType": info.table_type,
            "properties": dict(info.properties),
            "retentionSeconds": int(info.retention.total_seconds()),
            "topic": info.topic,
        },
        partition_keys=info.partition_keys,
        partitions=tuple(exported),
    )
    import json

    text = json.dumps(manifest.to_json(), indent=1, ensure_ascii=False).encode("utf-8")
    temporary = destination.join(f".{MANIFEST_NAME}.{manifest.export_id}")
    with destination.fs.open_output_stream(temporary) as stream:
        stream.write(text)
    destination.fs.move(temporary, manifest_path)  # last: the export is complete now
    return ExportSummary(
        table=str(info.name),
        destination=destination.uri,
        export_id=manifest.export_id,
        partitions=len(exported),
        files=total,
        bytes=sum(item.size for partition in exported for item in partition.files),
    )
