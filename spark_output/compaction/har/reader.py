"""Reading an archive the way Hadoop's ``HarFileSystem`` does: its index, a file's bytes,
and the check that archived copies hash as their originals did."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping

import pyarrow.fs as pafs

from spark_output.compaction.har.index import HAR_VERSION, HarEntry, parse_entry
from spark_output.errors import HarError

__all__ = ["list_har", "read_har_file", "verify_archive"]

_READ_CHUNK = 8 * 1024 * 1024


def _read_all(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path, compression=None) as f:
        data: bytes = f.read()
    return data


def list_har(fs: pafs.FileSystem, archive_dir: str) -> list[HarEntry]:
    """Read an archive's index the way ``HarFileSystem`` does; entries in index order.

    Only version 3 is accepted. The master index's byte ranges are followed (so an index
    line outside every range is not seen, exactly as in Hadoop). Every file entry must
    name a part file ``part-N`` of this archive and lie within it.

    Raises:
        HarError: no index, an unsupported version, a malformed ``_masterindex`` or
            ``_index`` line, or an entry outside its part file (or naming a part that
            is missing, or not a part name).
    """
    archive_dir = archive_dir.rstrip("/")
    try:
        master = _read_all(fs, posixpath.join(archive_dir, "_masterindex")).decode("utf-8")
        index = _read_all(fs, posixpath.join(archive_dir, "_index"))
    except FileNotFoundError as exc:
        raise HarError(f"not a Hadoop Archive (no index): {archive_dir}") from exc
    except UnicodeDecodeError as exc:
        raise HarError(f"malformed _masterindex in {archive_dir}: {exc}") from exc
    lines = master.split("\n")
    try:
        version = int(lines[0].split(" ")[0])
        ranges = [_index_range(line, len(index)) for line in lines[1:] if line.strip()]
    except ValueError as exc:
        raise HarError(f"malformed _masterindex in {archive_dir}: {exc}") from exc
    if version != HAR_VERSION:
        raise HarError(f"unsupported HAR version {version} in {archive_dir}")
    entries: list[HarEntry] = []
    try:
        for begin, end in ranges:
            for raw in index[begin:end].decode("utf-8").split("\n"):
                if raw:
                    entries.append(parse_entry(raw))
    except UnicodeDecodeError as exc:
        raise HarError(f"malformed _index in {archive_dir}: {exc}") from exc
    except HarError as exc:
        raise HarError(f"{exc} (in {archive_dir})") from exc
    _check_parts(fs, archive_dir, entries)
    return entries


def _index_range(line: str, size: int) -> tuple[int, int]:
    """The ``_index`` byte range of one ``_masterindex`` line (``startHash endHash begin
    end``), within the index's ``size``."""
    fields = line.split(" ")
    if len(fields) < 4:
        raise ValueError(f"line {line[:200]!r} has {len(fields)} fields, not 4")
    begin, end = int(fields[2]), int(fields[3])
    if not 0 <= begin <= end <= size:
        raise ValueError(f"line {line[:200]!r}: range {begin}-{end} is outside _index ({size} B)")
    return begin, end


def _check_parts(fs: pafs.FileSystem, archive_dir: str, entries: list[HarEntry]) -> None:
    """Refuse a file entry beyond the end of its part file, or naming a missing one."""
    sizes: dict[str, int | None] = {}
    for entry in entries:
        if entry.is_dir:
            continue
        if entry.part not in sizes:
            info = fs.get_file_info(posixpath.join(archive_dir, entry.part))
            sizes[entry.part] = int(info.size or 0) if info.type == pafs.FileType.File else None
        size = sizes[entry.part]
        if size is None:
            raise HarError(f"{entry.path} names the part {entry.part}, missing in {archive_dir}")
        if entry.offset + entry.length > size:
            raise HarError(
                f"{entry.path} lies beyond the end of {entry.part} ({entry.offset}+"
                f"{entry.length} > {size} B) in {archive_dir}"
            )


def read_har_file(fs: pafs.FileSystem, archive_dir: str, inner: str) -> bytes:
    """The bytes of the file ``inner`` (``/a/b`` or ``a/b``) inside the archive."""
    wanted = "/" + inner.strip("/")
    for entry in list_har(fs, archive_dir):
        if entry.path == wanted:
            if entry.is_dir:
                raise HarError(f"{wanted} is a directory in {archive_dir}")
            with fs.open_input_file(posixpath.join(archive_dir.rstrip("/"), entry.part)) as f:
                data: bytes = f.read_at(entry.length, entry.offset)
            return data
    raise HarError(f"{wanted} not found in {archive_dir}")


def verify_archive(fs: pafs.FileSystem, archive_dir: str, sha256: Mapping[str, str]) -> None:
    """Check that each file of ``sha256`` (hex digest by path inside the archive), read
    through the archive's index, hashes as given.

    Raises:
        HarError: a file is missing from the index or its bytes differ.
    """
    entries = {e.path: e for e in list_har(fs, archive_dir)}
    for path, expected in sha256.items():
        entry = entries.get(path)
        if entry is None or entry.is_dir:
            raise HarError(f"{path} missing from archive {archive_dir}")
        digest = hashlib.sha256()
        remaining = entry.length
        offset = entry.offset
        with fs.open_input_file(posixpath.join(archive_dir, entry.part)) as f:
            while remaining > 0:
                chunk = f.read_at(min(_READ_CHUNK, remaining), offset)
                if not chunk:
                    break
                digest.update(chunk)
                offset += len(chunk)
                remaining -= len(chunk)
        if remaining or digest.hexdigest() != expected:
            raise HarError(f"archived copy of {path} differs from the original")
