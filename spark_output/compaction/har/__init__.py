"""Hadoop Archives (HAR), written in pure Python and readable by Hadoop's ``HarFileSystem``.

:func:`archive_partition` packs a partition's data files into the hidden directory
``<partition>/_hcat_archive.har``; the partition's location becomes the archive's
``har://`` URI (:func:`har_location`), through which its files appear as they were.
Where each part lives:

* :mod:`~spark_output.compaction.har.codec` — Java's URL encoding and string hash;
* :mod:`~spark_output.compaction.har.index` — :class:`HarEntry` and the index files;
* :mod:`~spark_output.compaction.har.locations` — ``har://`` URIs, :data:`ARCHIVE_NAME`;
* :mod:`~spark_output.compaction.har.writer` — :func:`create_har`;
* :mod:`~spark_output.compaction.har.reader` — :func:`list_har`, :func:`read_har_file`;
* :mod:`~spark_output.compaction.har.partition` — :func:`archive_partition`.

The format (version 3: ``_masterindex``, ``_index``, ``part-N``), where each fact comes
from in Hadoop's source, and the ``har://`` URI forms are described in docs/compaction.md.
"""

from __future__ import annotations

from spark_output.compaction.har.codec import har_hash, java_string_hash, java_url_encode
from spark_output.compaction.har.index import HAR_VERSION, HarEntry
from spark_output.compaction.har.locations import (
    ARCHIVE_NAME,
    archive_storage_location,
    filesystem_uri,
    har_location,
    har_uri,
)
from spark_output.compaction.har.partition import archive_partition
from spark_output.compaction.har.reader import list_har, read_har_file
from spark_output.compaction.har.writer import DEFAULT_PART_SIZE, HarInfo, create_har
from spark_output.errors import HarError

__all__ = [
    "ARCHIVE_NAME",
    "DEFAULT_PART_SIZE",
    "HAR_VERSION",
    "HarEntry",
    "HarError",
    "HarInfo",
    "archive_partition",
    "archive_storage_location",
    "create_har",
    "filesystem_uri",
    "har_hash",
    "har_location",
    "har_uri",
    "java_string_hash",
    "java_url_encode",
    "list_har",
    "read_har_file",
]
