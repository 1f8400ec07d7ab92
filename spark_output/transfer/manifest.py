"""The export manifest ``_hcat_export.json``: what an export holds, and reading it back.

An export directory holds ``data/<spec>/<file>`` and, written last, the manifest: format
version, table definition, partition keys, and every partition with its files, sizes and
SHA-256 checksums (``schemas/export_manifest.schema.json``). An export without a
manifest is incomplete. :func:`copy_stream` copies one file and hashes it on the way.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyarrow import fs as pafs

from hcat_notify import InvalidInputError, PartitionSpec, TableName

__all__ = [
    "DATA_DIR",
    "FORMAT",
    "MANIFEST_NAME",
    "VERSION",
    "ExportedFile",
    "ExportedPartition",
    "Manifest",
    "ManifestError",
    "OutsideExportError",
    "check_inside",
    "copy_stream",
    "file_checksum",
]

MANIFEST_NAME = "_hcat_export.json"
DATA_DIR = "data"
FORMAT = "hcat-notify-export"
VERSION = 1
_CHUNK = 4 * 1024 * 1024


class ManifestError(InvalidInputError):
    """The export's manifest is missing, unreadable or not one this version understands."""


class OutsideExportError(InvalidInputError):
    """An entry of an export is a symbolic link, or resolves outside the export."""


@dataclass(frozen=True)
class ExportedFile:
    """One file of an exported partition: its path relative to the partition's directory
    under ``data/`` (``part-0.parquet``, or ``_hcat_archive.har/part-0`` for an archive)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ExportedPartition:
    """A partition in an export: its spec, where it lived, whether it is an archive."""

    spec: PartitionSpec
    location: str
    archived: bool
    files: tuple[ExportedFile, ...]

    @property
    def data_dir(self) -> str:
        """Its directory relative to the export root."""
        return posixpath.join(DATA_DIR, self.spec.to_path())


@dataclass(frozen=True)
class Manifest:
    """An export's manifest."""

    export_id: str
    exported_at: str
    table: TableName
    definition: Mapping[str, Any]
    partition_keys: tuple[str, ...]
    partitions: tuple[ExportedPartition, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "exportId": self.export_id,
            "exportedAt": self.exported_at,
            "table": {"db": self.table.db, "table": self.table.table, **self.definition},
            "partitionKeys": list(self.partition_keys),
            "partitions": [
                {
                    "spec": partition.spec.to_path(),
                    "values": partition.spec.as_strings(),
                    "location": partition.location,
                    "archived": partition.archived,
                    "fileCount": len(partition.files),
                    "bytes": sum(item.size for item in partition.files),
                    "files": [
                        {"path": item.path, "size": item.size, "sha256": item.sha256}
                        for item in partition.files
                    ],
                }
                for partition in self.partitions
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """Read a manifest, checking what the import relies on.

        Raises:
            ManifestError: not an hcat-notify export of a known version, or a field is
                missing or malformed.
        """
        try:
            if not isinstance(data, Mapping) or data.get("format") != FORMAT:
                raise ManifestError(f"not an hcat-notify export manifest (format {FORMAT!r})")
            if data.get("version") != VERSION:
                raise ManifestError(
                    f"export format version {data.get('version')!r} is not supported "
                    f"(this hcat-notify reads version {VERSION})"
                )
            table = data["table"]
            keys = tuple(str(key) for key in data["partitionKeys"])
            definition = {
                "location": str(table["location"]),
                "storageFormat": str(table["storageFormat"]),
                "tableType": str(table["tableType"]),
                "properties": dict(table.get("properties") or {}),
                "retentionSeconds": int(table["retentionSeconds"]),
            }
            _refuse_repeats("partition key", keys)
            partitions = [_partition(item, keys) for item in data["partitions"]]
            _refuse_repeats("partition", [partition.spec.to_path() for partition in partitions])
            return cls(
                export_id=str(data["exportId"]),
                exported_at=str(data["exportedAt"]),
                table=TableName(str(table["db"]), str(table["table"])),
                definition=definition,
                partition_keys=keys,
                partitions=tuple(partitions),
            )
        except ManifestError:
            raise
        except (KeyError, TypeError, ValueError, InvalidInputError) as exc:
            raise ManifestError(f"corrupt export manifest: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def read(cls, filesystem: pafs.FileSystem, root: str, where: str) -> Manifest:
        """The manifest of the export at ``root``; ``where`` names the export in errors.

        Raises:
            ManifestError: no manifest (an incomplete or no export), or a corrupt one.
        """
        path = posixpath.join(root, MANIFEST_NAME)
        check_inside(filesystem, root, MANIFEST_NAME, where)
        if filesystem.get_file_info(path).type != pafs.FileType.File:
            raise ManifestError(
                f"no export at {where}: {MANIFEST_NAME} is missing (an export writes it "
                "last, so the export is incomplete or was never made)"
            )
        with filesystem.open_input_stream(path) as stream:
            raw = stream.read()
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ManifestError(f"corrupt export manifest {where}/{MANIFEST_NAME}: {exc}") from exc
        return cls.from_json(data)


def _refuse_repeats(what: str, names: Sequence[str]) -> None:
    # Each entry of a manifest stands for one thing to copy and register: a repeated one
    # would be counted, checked and copied again, yet land once.
    repeated = [(name, count) for name, count in Counter(names).items() if count > 1]
    if repeated:
        name, count = repeated[0]
        more = f" ({len(repeated) - 1} more repeated)" if len(repeated) > 1 else ""
        raise ManifestError(
            f"corrupt export manifest: {what} {name} is listed {count} times{more}; "
            "nothing imported"
        )


def _partition(item: Mapping[str, Any], keys: tuple[str, ...]) -> ExportedPartition:
    """One entry of ``partitions``, checked against itself: values, file count, bytes."""
    spec = PartitionSpec.parse(str(item["spec"])).for_table(keys, partial=False)
    path = spec.to_path()
    values = item["values"]
    if not isinstance(values, Mapping) or dict(values) != spec.as_strings():
        given = json.dumps(values, default=str)
        raise ManifestError(
            f"corrupt export manifest: partition {path} has values {given}, "
            f"not those of its spec ({json.dumps(spec.as_strings())}); nothing imported"
        )
    files = tuple(
        ExportedFile(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in item["files"]
    )
    for exported in files:
        parts = exported.path.split("/")
        if exported.path.startswith("/") or ".." in parts or "" in parts or "." in parts:
            raise ManifestError(f"file path {exported.path!r} leaves its partition")
    names = [exported.path for exported in files]
    _refuse_repeats("file", [f"{path}/{name}" for name in names])
    directories = {
        "/".join(name.split("/")[:end]) for name in names for end in range(1, name.count("/") + 1)
    }
    clash = sorted(directories.intersection(names))
    if clash:
        raise ManifestError(
            f"corrupt export manifest: {path}/{clash[0]} is listed both as a file and as "
            "a directory of another; nothing imported"
        )
    size = sum(exported.size for exported in files)
    if (int(item["fileCount"]), int(item["bytes"])) != (len(files), size):
        raise ManifestError(
            f"corrupt export manifest: partition {path} says {item['fileCount']} file(s), "
            f"{item['bytes']} bytes, but lists {len(files)} file(s), {size} bytes; nothing "
            "imported"
        )
    return ExportedPartition(spec, str(item["location"]), bool(item["archived"]), files)


def check_inside(filesystem: pafs.FileSystem, root: str, relative: str, where: str) -> None:
    """Refuse an entry of the export at ``root`` that is, or lies under, a symbolic link,
    or that resolves outside the export: an import copies only what the export holds.

    ``where`` names the export in errors. Only the local filesystem is checked: object
    stores have no links, and pyarrow does not report HDFS's (off by default in Hadoop).

    Raises:
        OutsideExportError: the entry is a link, under one, or outside ``root``.
    """
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return
    name = f"{where}/{relative}"
    path = root
    for part in relative.split("/"):
        path = posixpath.join(path, part)
        if os.path.islink(path):
            raise OutsideExportError(
                f"{where}/{posixpath.relpath(path, root)} is a symbolic link (to "
                f"{os.readlink(path)}); an import reads only files inside the export, "
                "never through a link; nothing imported"
            )
    real_root = os.path.realpath(root)
    if os.path.commonpath([os.path.realpath(path), real_root]) != real_root:
        raise OutsideExportError(f"{name} resolves outside the export; nothing imported")


def file_checksum(filesystem: pafs.FileSystem, path: str) -> tuple[int, str]:
    """(size, SHA-256 hex digest) of a file."""
    digest = hashlib.sha256()
    size = 0
    with filesystem.open_input_stream(path) as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Writable(Protocol):
    def write(self, data: bytes, /) -> Any: ...


def copy_stream(reader: _Readable, writer: _Writable) -> tuple[int, str]:
    """Copy what ``reader`` holds to ``writer``, hashing it on the way: (size, SHA-256)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := reader.read(_CHUNK):
        digest.update(chunk)
        writer.write(chunk)
        size += len(chunk)
    return size, digest.hexdigest()
