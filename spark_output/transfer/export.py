"""``export_table``: copy a table's partitions and definition to a self-describing directory.

The files go to ``<to>/data/<spec>/...`` (hashed while they are copied, through
``pyarrow.fs``, so the destination may be HDFS or S3), then the manifest
``<to>/_hcat_export.json`` is written last: an export is complete exactly when its
manifest exists. A partition archived in a Hadoop Archive is exported as its archive.
"""

from __future__ import annotations

import json
import os
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
    split_location,
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


def _comparable(where: TableLocation) -> tuple[str, str, str]:
    """(scheme, authority, path) of a location, symlinks resolved on the local filesystem."""
    if isinstance(where.fs, pafs.LocalFileSystem):
        return "file", "", os.path.realpath(where.path)
    scheme, authority, _ = split_location(where.uri)
    return scheme, authority, where.path


def _overlap(first: TableLocation, second: TableLocation) -> bool:
    """Whether one location is the other or inside it."""
    (*one, a), (*other, b) = _comparable(first), _comparable(second)
    if one != other:
        return False
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _check_destination(
    destination: TableLocation, to: str, table: str, locations: list[str]
) -> None:
    """Refuse a destination that is a file, or where the export would mix with the
    table's own files (an export inside its table breaks ``discover``; a table inside the
    export could be overwritten by its own copy)."""
    kind = destination.fs.get_file_info(destination.path).type
    if kind not in (pafs.FileType.Directory, pafs.FileType.NotFound):
        raise InvalidInputError(
            f"cannot export to {to}: it is a file, not a directory; nothing written"
        )
    for location in locations:
        try:
            where = TableLocation.parse(storage_location(location))
        except (OSError, ValueError):
            continue  # not a location this export could write into
        if _overlap(destination, where):
            raise InvalidInputError(
                f"cannot export to {to}: it overlaps {location}, where {table} keeps its "
                "files; choose a directory outside the table; nothing written"
            )
    if destination.fs.get_file_info(destination.join(MANIFEST_NAME)).type != (
        pafs.FileType.NotFound
    ):
        raise InvalidInputError(f"{to} already holds an export ({MANIFEST_NAME}); nothing written")


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
        hcat_notify.InvalidInputError: ``to`` is empty, already holds an export, is a file,
            overlaps the table's location or a partition's, or cannot be created;
            ``spec`` matches no partition.
        OSError: a partition's files cannot be read or the destination written.
    """
    info = catalog.get_table(table)
    wanted = info.spec(spec, partial=True) if spec is not None else None
    chosen = catalog.list_partitions(info.name, wanted)
    if wanted and not chosen:
        raise InvalidInputError(f"no partition of {info.name} matches {wanted}; nothing exported")
    if not to.strip():  # Path("") is the current directory
        raise InvalidInputError(
            f"an export needs a destination directory (a path or URI), not {to!r}"
        )
    try:
        destination = TableLocation.parse(to)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot export to {to!r}: {exc}") from exc
    locations = [info.location, *(partition.location for partition in chosen)]
    _check_destination(destination, to, str(info.name), locations)
    try:
        destination.fs.create_dir(destination.path, recursive=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot export to {to}: {exc}") from exc
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
    text = json.dumps(manifest.to_json(), indent=1, ensure_ascii=False).encode("utf-8")
    temporary = destination.join(f".{MANIFEST_NAME}.{manifest.export_id}")
    with destination.fs.open_output_stream(temporary) as stream:
        stream.write(text)
    # Last: the export is complete now.
    destination.fs.move(temporary, destination.join(MANIFEST_NAME))
    return ExportSummary(
        table=str(info.name),
        destination=destination.uri,
        export_id=manifest.export_id,
        partitions=len(exported),
        files=total,
        bytes=sum(item.size for partition in exported for item in partition.files),
    )
