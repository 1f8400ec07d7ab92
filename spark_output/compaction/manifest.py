"""The audit manifest ``_hcat_compaction.json`` that every compacted partition gets.

It lists the original files (name, size, rows) and the new ones, and is written before
the originals are deleted, so an interrupted switch can be finished by hand (see
docs/compaction.md). Its leading underscore hides it from Spark and Hive.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from datetime import UTC, datetime
from typing import Any

from pyarrow import fs as pafs

from spark_output.errors import CompactionError

__all__ = ["MANIFEST_NAME", "write_manifest"]

MANIFEST_NAME = "_hcat_compaction.json"
"""Audit manifest written into every compacted partition directory."""


def write_manifest(fs: pafs.FileSystem, directory: str, entry: dict[str, Any]) -> str:
    """Append ``entry`` (plus a UTC timestamp) to ``<directory>/_hcat_compaction.json``.

    The file holds ``{"format": "hcat-compaction-manifest", "version": 1,
    "compactions": [...]}``, the latest compaction last. It is replaced atomically where
    the filesystem's rename is.

    Returns:
        The manifest's path.

    Raises:
        CompactionError: an existing manifest is unreadable (nothing is changed).
    """
    path = posixpath.join(directory, MANIFEST_NAME)
    document: dict[str, Any] = {
        "format": "hcat-compaction-manifest",
        "version": 1,
        "compactions": [],
    }
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as f:
            try:
                existing = json.loads(f.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CompactionError(f"unreadable compaction manifest {path}: {exc}") from exc
        if isinstance(existing, dict) and isinstance(existing.get("compactions"), list):
            document["compactions"] = existing["compactions"]
    stamped = {"compacted_at": datetime.now(UTC).isoformat(timespec="seconds"), **entry}
    document["compactions"].append(stamped)
    temp = posixpath.join(directory, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
    with fs.open_output_stream(temp, compression=None) as f:
        f.write(json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    fs.move(temp, path)
    return path
