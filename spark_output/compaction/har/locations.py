"""Where an archive lives: the Hadoop URI of a path, ``har://`` URIs, and the location of
a partition archived in place (:data:`ARCHIVE_NAME` inside its directory).

Locations inside ``har://`` URIs are Hadoop path strings, as everywhere in spark_output:
an escaped partition directory name such as ``region=us%2Feast`` is kept as it is,
because ``HarFileSystem`` takes the underlying path from the URI's decoded path, and
Hadoop's ``Path`` encodes what it parses from a string.
"""

from __future__ import annotations

import os
import posixpath

import pyarrow.fs as pafs

from hcat_notify import storage_location
from spark_output.errors import HarError
from spark_output.fs import split_location

__all__ = [
    "ARCHIVE_NAME",
    "archive_storage_location",
    "filesystem_uri",
    "har_location",
    "har_uri",
]

ARCHIVE_NAME = "_hcat_archive.har"
"""Name of the archive :func:`~spark_output.compaction.har.archive_partition` creates
inside a partition directory."""


def filesystem_uri(fs: pafs.FileSystem, path: str, *, base_uri: str | None = None) -> str:
    """The Hadoop URI of ``path`` on ``fs``: ``file:/abs``, ``s3a://bucket/key``, ...

    ``base_uri`` (e.g. ``hdfs://namenode:8020``) is needed for filesystems whose
    address pyarrow does not expose (HDFS); it is joined with ``path`` as given.
    """
    if base_uri is not None:
        return base_uri.rstrip("/") + "/" + path.lstrip("/")
    if isinstance(fs, pafs.LocalFileSystem):
        return "file:" + os.path.abspath(path)
    if isinstance(fs, pafs.S3FileSystem):
        return "s3a://" + path.lstrip("/")
    if isinstance(fs, pafs.GcsFileSystem):
        return "gs://" + path.lstrip("/")
    raise HarError(f"cannot tell the Hadoop URI of {path!r} on {type(fs).__name__}; pass base_uri")


def har_uri(archive_dir: str, inner: str = "") -> str:
    """The ``har://`` URI of ``inner`` (a path inside the archive; "" for its root).

    ``archive_dir`` is an absolute local path (``/data/t/p=1/x.har``) or a Hadoop path
    string (``file:/data/...``, ``hdfs://nn:8020/...``, ``s3a://bucket/...``), taken
    literally (escaped directory names stay escaped). The result names
    the underlying filesystem in the authority, as ``HarFileSystem`` expects:
    ``har://file-localhost/data/t/p=1/x.har``, ``har://hdfs-nn:8020/...``,
    ``har://s3a-bucket/...``.
    """
    scheme, authority, path = split_location(archive_dir)
    if scheme in ("", "file"):
        if authority not in ("", "localhost"):
            raise HarError(f"not a local path: {archive_dir!r}")
        if not path.startswith("/"):
            raise HarError(f"archive path must be absolute: {archive_dir!r}")
        authority = "file-localhost"
    else:
        if not authority:
            raise HarError(f"URI without authority: {archive_dir!r}")
        path = path or "/"
        authority = f"{scheme}-{authority}"
    path = posixpath.normpath(path)
    if not path.endswith(".har"):
        raise HarError(f"archive directory name must end with .har: {archive_dir!r}")
    inner = inner.strip("/")
    if inner:
        path = f"{path}/{inner}"
    return f"har://{authority}{path}"


def har_location(partition_uri: str) -> str:
    """The location of a partition archived by
    :func:`~spark_output.compaction.har.archive_partition`, given the partition
    directory's URI (or absolute local path) where it now lives.

    An archive holds no absolute paths (its index names part files relative to the
    archive), so a staged partition directory can be archived and then moved: compute
    its location from the final URI.
    """
    return har_uri(partition_uri.rstrip("/") + "/" + ARCHIVE_NAME)


archive_storage_location = storage_location
"""Where a location's files are stored (:func:`hcat_notify.storage_location`)."""
