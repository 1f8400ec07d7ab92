"""The marker ``_hcat_superseded.json`` that a compaction leaves in a partition's old directory.

It names the new location, the switch time and the files the compacted copy was made
from; :mod:`spark_output.maintenance.purge` deletes the directory only when the marker
says it is safe.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow.fs as pafs

from hcat_notify.errors import LinkInPartitionError
from hcat_notify.files import new_file_at, open_partition_dir
from spark_output.fs import FileStat, TableLocation

__all__ = ["SUPERSEDED_MARKER", "Marker", "MarkerError", "read_marker", "write_marker"]

logger = logging.getLogger(__name__)

SUPERSEDED_MARKER = "_hcat_superseded.json"
"""Marker written into a partition's old directory once its location has moved."""


def write_marker(
    old_location: str,
    *,
    table: str,
    spec: str,
    new_location: str,
    files: Sequence[FileStat],
    bases: Sequence[str] = (),
) -> None:
    """Leave ``_hcat_superseded.json`` in the old directory (best effort: without it, purge
    keeps the directory, which is safe). Written to a new hidden temporary, then renamed
    over the name, as :func:`spark_output.compaction.manifest.write_manifest` does, so
    that nothing already at the name (a link) is written through. Locally the directory
    is reached from ``bases`` without following a link
    (:func:`hcat_notify.files.open_partition_dir`) and both are made relative to it: a
    directory swapped for a link gets no marker."""
    old = TableLocation.parse(old_location)
    document = {
        "format": "hcat-superseded",
        "version": 1,
        "table": table,
        "partition": spec,
        "superseded_by": new_location,
        "superseded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": [{"name": f.name, "size": f.size} for f in files],
    }
    name = f".{SUPERSEDED_MARKER}.{uuid.uuid4().hex}.tmp"
    body = json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    if isinstance(old.fs, pafs.LocalFileSystem):
        _write_local(old.path, name, body, bases)
        return
    temp = posixpath.join(old.path, name)
    try:
        with old.fs.open_output_stream(temp, compression=None) as stream:
            stream.write(body)
        old.fs.move(temp, posixpath.join(old.path, SUPERSEDED_MARKER))
    except OSError:
        with contextlib.suppress(OSError):
            old.fs.delete_file(temp)


def _write_local(directory: str, temp: str, body: bytes, bases: Sequence[str]) -> None:
    try:
        with open_partition_dir(directory, bases) as dir_fd:
            # a new file of its own (O_EXCL never follows a link), renamed over the name:
            # a link planted at the marker's name is replaced, never written through
            try:
                with new_file_at(dir_fd, temp) as out:
                    out.write(body)
                os.rename(temp, SUPERSEDED_MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
    except (OSError, LinkInPartitionError) as exc:
        logger.warning("no superseded marker written in %s: %s", directory, exc)


@dataclass(frozen=True)
class Marker:
    """A parsed ``_hcat_superseded.json`` (see :func:`write_marker`)."""

    table: str
    partition: str
    superseded_by: str
    superseded_at: datetime
    files: Mapping[str, int]


class MarkerError(Exception):
    """A marker that cannot be trusted; the message says why (purge reports it, never raises it)."""


def read_marker(fs: pafs.FileSystem, directory: str) -> Marker | None:
    """The marker in ``directory``, or None if it has none.

    Raises:
        MarkerError: the marker is unreadable or not one :func:`write_marker` wrote.
    """
    path = posixpath.join(directory, SUPERSEDED_MARKER)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    try:
        with fs.open_input_stream(path, compression=None) as stream:
            document = json.loads(stream.read().decode("utf-8"))
        if document.get("format") != "hcat-superseded" or document.get("version") != 1:
            raise MarkerError("not a version 1 hcat-superseded marker")
        when = datetime.fromisoformat(document["superseded_at"])
        files = {str(f["name"]): int(f["size"]) for f in document["files"]}
        marker = Marker(
            table=str(document["table"]),
            partition=str(document["partition"]),
            superseded_by=str(document["superseded_by"]),
            superseded_at=when if when.tzinfo is not None else when.replace(tzinfo=UTC),
            files=files,
        )
    except MarkerError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MarkerError(f"unreadable {SUPERSEDED_MARKER}: {type(exc).__name__}: {exc}") from exc
    return marker
