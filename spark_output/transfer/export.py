"""``export_table``: copy a table's partitions and definition to a self-describing directory.

The files go to ``<to>/data/<spec>/...`` (hashed while they are copied, through
``pyarrow.fs``, so the destination may be HDFS or S3), then the manifest
``<to>/_hcat_export.json`` is written last: an export is complete exactly when its
manifest exists. A partition archived in a Hadoop Archive is exported as its archive.
``<to>`` must be new or empty, and apart from every table and warehouse root
(:mod:`spark_output.transfer.destination`); no data file is read through a link.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyarrow import fs as pafs

from hcat_notify import (
    Catalog,
    InvalidInputError,
    LinkInPartitionError,
    PartitionInfo,
    PartitionSpec,
    TableInfo,
    TableLocation,
    list_data_files,
    storage_location,
)
from hcat_notify.files import open_data_file, open_partition_dir, partition_bases
from hcat_notify.safe_delete import list_tree
from spark_output.transfer.destination import ExportTarget, check_destination, open_destination
from spark_output.transfer.manifest import (
    DATA_DIR,
    MANIFEST_NAME,
    ExportedFile,
    ExportedPartition,
    Manifest,
    copy_stream,
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


def _archive_files(archive: TableLocation, bases: Sequence[str]) -> list[tuple[str, str]]:
    """An archive directory's files as (path, path relative to the archive's parent);
    on the local filesystem reached from ``bases`` and listed without following a link,
    and a link refused."""
    name = posixpath.basename(archive.path)
    if not isinstance(archive.fs, pafs.LocalFileSystem):
        selector = pafs.FileSelector(archive.path, recursive=True)
        return [
            (info.path, posixpath.join(name, info.path[len(archive.path) + 1 :]))
            for info in archive.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]
    with open_partition_dir(archive.path, bases) as fd:
        entries = list_tree(fd)
    links = [entry.path for entry in entries if entry.kind in ("link", "other")]
    if links:
        raise LinkInPartitionError(
            f"{archive.path}/{links[0]} is a symbolic link or a special file; an archive is "
            "exported only as regular files, never through a link"
        )
    return [
        (archive.join(entry.path), posixpath.join(name, entry.path))
        for entry in entries
        if entry.kind == "file"
    ]


def _source_files(
    partition: PartitionInfo, bases: Sequence[str]
) -> tuple[TableLocation, list[tuple[str, str]]]:
    """The partition's directory and its files as (path on the filesystem, relative path)."""
    stored = storage_location(partition.location)
    if stored != partition.location:  # an archive: export the archive directory
        archive = TableLocation.parse(stored)
        return archive, sorted(_archive_files(archive, bases), key=lambda item: item[1])
    where = TableLocation.parse(partition.location)
    listed = list_data_files(where.fs, where.path, bases=bases)
    return where, [(stat.path, stat.name) for stat in listed]


def _copy(
    source: TableLocation, path: str, target: ExportTarget, relative: str, bases: Sequence[str]
) -> tuple[int, str]:
    """Copy one data file into the export (never reading through a link, its directory
    reached again from ``bases``): (size, SHA-256)."""
    with (
        open_data_file(source.fs, path, bases=bases) as reader,
        target.new_file(relative) as writer,
    ):
        return copy_stream(reader, writer)


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
        hcat_notify.InvalidInputError: ``to`` is empty, a file or a directory that is not
            empty, is at, inside or around a registered table's or partition's location,
            is or holds a warehouse root, or cannot be created; something appeared in it
            during the export; ``spec`` matches no partition.
        hcat_notify.LinkInPartitionError: a partition's directory (or archive) holds a
            symbolic link (local filesystem).
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
    check_destination(catalog, destination, to, str(info.name))
    # Listed before anything is written: a link in a partition, or on the way to it
    # from the warehouse root or the table's location, refuses the export.
    bases = partition_bases(catalog.settings.warehouse, info.location)
    sources = [(partition, *_source_files(partition, bases)) for partition in chosen]
    with open_destination(destination, to) as target:
        exported = _copy_all(sources, target, progress, bases)
        manifest = _manifest(info, exported)
        text = json.dumps(manifest.to_json(), indent=1, ensure_ascii=False).encode("utf-8")
        temporary = f".{MANIFEST_NAME}.{manifest.export_id}"
        with target.new_file(temporary) as stream:
            stream.write(text)
        # Last: the export is complete now.
        target.rename(temporary, MANIFEST_NAME)
    return ExportSummary(
        table=str(info.name),
        destination=destination.uri,
        export_id=manifest.export_id,
        partitions=len(exported),
        files=sum(len(partition.files) for partition in exported),
        bytes=sum(item.size for partition in exported for item in partition.files),
    )


def _copy_all(
    sources: list[tuple[PartitionInfo, TableLocation, list[tuple[str, str]]]],
    target: ExportTarget,
    progress: Progress,
    bases: Sequence[str] = (),
) -> list[ExportedPartition]:
    total = sum(len(files) for _, _, files in sources)
    done = 0
    exported = []
    for partition, where, files in sources:
        copied = []
        for path, relative in files:
            inside = posixpath.join(DATA_DIR, partition.spec.to_path(), relative)
            size, digest = _copy(where, path, target, inside, bases)
            copied.append(ExportedFile(relative, size, digest))
            done += 1
            progress(done, total, f"{partition.spec}/{relative}")
        exported.append(
            ExportedPartition(partition.spec, partition.location, partition.archived, tuple(copied))
        )
    return exported


def _manifest(info: TableInfo, exported: list[ExportedPartition]) -> Manifest:
    return Manifest(
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
