"""Hadoop Archives (HAR), written in pure Python and readable by Hadoop's ``HarFileSystem``.

:func:`archive_partition` packs a partition's data files into the hidden directory
``<partition>/_hcat_archive.har``; the partition's location becomes the archive's
``har://`` URI (:func:`har_location`), through which its files appear as they were. The
format (version 3: ``_masterindex``, ``_index``, ``part-N``), where each fact comes from in
Hadoop's source, and the ``har://`` URI forms are described in docs/compaction.md.

Locations inside ``har://`` URIs are Hadoop path strings, as everywhere in spark_output:
an escaped partition directory name such as ``region=us%2Feast`` is kept as it is,
because ``HarFileSystem`` takes the underlying path from the URI's decoded path, and
Hadoop's ``Path`` encodes what it parses from a string.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus

import pyarrow.fs as pafs

from hcat_notify import storage_location
from spark_output.compaction.manifest import write_manifest
from spark_output.compaction.read import parquet_or_orc_rows
from spark_output.compaction.result import PartitionCompaction
from spark_output.errors import HarError
from spark_output.fs import delete_data_file, delete_dir_quietly, list_data_files, split_location

if TYPE_CHECKING:
    from spark_output.compaction.policy import CompactionPolicy

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

HAR_VERSION = 3
"""The archive version we write (``HarFileSystem.VERSION``)."""

DEFAULT_PART_SIZE = 2 * 1024**3
"""Bytes per part file before a new one is started (``HadoopArchives.partSize``: 2 GiB)."""

ARCHIVE_NAME = "_hcat_archive.har"
"""Name of the archive :func:`archive_partition` creates inside a partition directory."""

INDEX_BLOCK_ENTRIES = 1000
"""Entries per ``_masterindex`` line (``HArchivesReducer.numIndexes``)."""

_FILE_PERMISSION = 0o644
_DIR_PERMISSION = 0o755
_COPY_CHUNK = 8 * 1024 * 1024
_JAVA_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


@dataclass(frozen=True)
class HarEntry:
    """One line of ``_index``: a file or directory inside the archive.

    ``path`` is the path inside the archive (``/`` is the root, ``/a/b`` below it).
    Files have ``part``, ``offset`` and ``length``; directories have ``children``
    (names, not paths) and ``part == ""``.
    """

    path: str
    is_dir: bool
    part: str = ""
    offset: int = 0
    length: int = 0
    modification_time_ms: int = 0
    permission: int = _FILE_PERMISSION
    owner: str = ""
    group: str = ""
    children: tuple[str, ...] = ()

    def index_line(self) -> str:
        """The ``_index`` line for this entry (with Hadoop's trailing space and newline)."""
        props = java_url_encode(
            f"{self.modification_time_ms} {self.permission} "
            f"{java_url_encode(self.owner)} {java_url_encode(self.group)}"
        )
        name = java_url_encode(self.path)
        if self.is_dir:
            children = "".join(java_url_encode(child) + " " for child in self.children)
            return f"{name} dir {props} 0 0 {children}\n"
        return f"{name} file {self.part} {self.offset} {self.length} {props} \n"


@dataclass(frozen=True)
class HarInfo:
    """What :func:`create_har` wrote."""

    archive_dir: str
    version: int
    parts: tuple[str, ...]
    files: int
    directories: int
    bytes: int
    entries: tuple[HarEntry, ...]
    sha256: dict[str, str] = dataclasses.field(default_factory=dict)
    """hex SHA-256 of each archived file's bytes, by path inside the archive."""


# --------------------------------------------------------------------------- encoding


def java_url_encode(text: str) -> str:
    """``java.net.URLEncoder.encode(text, "UTF-8")``.

    Letters, digits and ``.-*_`` stay; a space becomes ``+``; every other UTF-8 byte
    becomes ``%XX`` with upper-case hex (``~`` too, unlike Python's ``quote_plus``).
    """
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if byte in _JAVA_URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def java_url_decode(text: str) -> str:
    """``java.net.URLDecoder.decode(text, "UTF-8")``: ``+`` is a space, ``%XX`` a byte."""
    return unquote_plus(text, encoding="utf-8", errors="strict")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, 32-bit signed overflow)."""
    data = text.encode("utf-16-be", errors="surrogatepass")
    value = 0
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def har_hash(path: str) -> int:
    """``HarFileSystem.getHarHash``: ``path.toString().hashCode() & 0x7fffffff``.

    ``path`` must be the normalized archive path (``/`` or ``/a/b``), as Hadoop's ``Path``
    prints it.
    """
    return java_string_hash(path) & 0x7FFFFFFF


# --------------------------------------------------------------------------- URIs


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
    """The location of a partition archived by :func:`archive_partition`, given the
    partition directory's URI (or absolute local path) where it now lives.

    An archive holds no absolute paths (its index names part files relative to the
    archive), so a staged partition directory can be archived and then moved: compute
    its location from the final URI.
    """
    return har_uri(partition_uri.rstrip("/") + "/" + ARCHIVE_NAME)


archive_storage_location = storage_location
"""Where a location's files are stored (:func:`hcat_notify.storage_location`)."""


# --------------------------------------------------------------------------- writing


def _owner_group() -> tuple[str, str]:
    user = getpass.getuser()
    try:
        import grp

        group = grp.getgrgid(os.getgid()).gr_name
    except (ImportError, KeyError):
        group = user
    return user, group


def _mtime_ms(info: pafs.FileInfo) -> int:
    mtime_ns = info.mtime_ns
    return int(mtime_ns // 1_000_000) if mtime_ns is not None else int(time.time() * 1000)


def _index_bytes(entries: Sequence[HarEntry]) -> tuple[bytes, bytes]:
    """``_index`` and ``_masterindex`` contents for ``entries`` (sorted here)."""
    ordered = sorted(entries, key=lambda e: (har_hash(e.path), e.path))
    index = bytearray()
    master = bytearray(f"{HAR_VERSION} \n".encode())
    start_hash = 0
    start_pos = 0
    written = 0
    last_hash = 0
    for entry in ordered:
        last_hash = har_hash(entry.path)
        index += entry.index_line().encode("utf-8")
        written += 1
        if written == INDEX_BLOCK_ENTRIES:
            master += f"{start_hash} {last_hash} {start_pos} {len(index)} \n".encode()
            start_pos = len(index)
            start_hash = last_hash
            written = 0
    if written:
        master += f"{start_hash} {last_hash} {start_pos} {len(index)} \n".encode()
    return bytes(index), bytes(master)


def create_har(
    fs: pafs.FileSystem,
    source_dir: str,
    archive_dir: str,
    *,
    names: Sequence[str] | None = None,
    part_size: int = DEFAULT_PART_SIZE,
) -> HarInfo:
    """Archive ``source_dir`` into the new directory ``archive_dir`` (``*.har``).

    The archive's root ``/`` is ``source_dir``: a file ``source_dir/a/b`` is ``/a/b``
    inside it. ``names`` limits the archive to these top-level entries of ``source_dir``
    (files or directories, archived recursively); by default everything in
    ``source_dir`` is archived except ``archive_dir`` itself. Files are copied into
    ``part-0``, ``part-1``, ... starting a new part before a file that would make the
    current one exceed ``part_size``. ``archive_dir`` must not exist. Modification times
    come from the source files; permissions are 0644/0755 and owner/group the current
    user's (``HarFileSystem`` does not use them).
    """
    if part_size <= 0:
        raise HarError(f"part_size must be positive, got {part_size}")
    source_dir = source_dir.rstrip("/") or "/"
    archive_dir = archive_dir.rstrip("/")
    if not archive_dir.endswith(".har"):
        raise HarError(f"archive directory name must end with .har: {archive_dir}")
    if fs.get_file_info(archive_dir).type != pafs.FileType.NotFound:
        raise HarError(f"archive already exists: {archive_dir}")
    root_info = fs.get_file_info(source_dir)
    if root_info.type != pafs.FileType.Directory:
        raise HarError(f"not a directory: {source_dir}")
    owner, group = _owner_group()

    top = [
        info
        for info in fs.get_file_info(pafs.FileSelector(source_dir))
        if info.path.rstrip("/") != archive_dir
    ]
    if names is not None:
        wanted = set(names)
        top = [info for info in top if info.base_name in wanted]
        missing = wanted - {info.base_name for info in top}
        if missing:
            raise HarError(f"not found in {source_dir}: {sorted(missing)}")

    entries: list[HarEntry] = []
    files: list[tuple[str, pafs.FileInfo]] = []  # (archive path, info)

    def visit(archive_path: str, info: pafs.FileInfo, children: list[pafs.FileInfo]) -> None:
        children = sorted(children, key=lambda c: c.base_name)
        entries.append(
            HarEntry(
                path=archive_path,
                is_dir=True,
                modification_time_ms=_mtime_ms(info),
                permission=_DIR_PERMISSION,
                owner=owner,
                group=group,
                children=tuple(c.base_name for c in children),
            )
        )
        for child in children:
            child_path = posixpath.join(archive_path, child.base_name)
            if child.type == pafs.FileType.Directory:
                visit(child_path, child, fs.get_file_info(pafs.FileSelector(child.path)))
            elif child.type == pafs.FileType.File:
                files.append((child_path, child))
            else:
                raise HarError(f"cannot archive {child.path}: not a file or directory")

    visit("/", root_info, top)

    fs.create_dir(archive_dir, recursive=True)
    try:
        part_no = -1
        part_pos = 0
        parts: list[str] = []
        digests: dict[str, str] = {}
        out = None
        total = 0
        try:
            for archive_path, info in files:
                size = info.size or 0
                if out is None or (part_pos > 0 and part_pos + size > part_size):
                    if out is not None:
                        out.close()
                    part_no += 1
                    parts.append(f"part-{part_no}")
                    out = fs.open_output_stream(
                        posixpath.join(archive_dir, parts[-1]), compression=None
                    )
                    part_pos = 0
                digest = hashlib.sha256()
                copied = 0
                with fs.open_input_stream(info.path, compression=None) as src:
                    while chunk := src.read(_COPY_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        copied += len(chunk)
                if copied != size:
                    raise HarError(f"{info.path} changed size while archiving")
                digests[archive_path] = digest.hexdigest()
                entries.append(
                    HarEntry(
                        path=archive_path,
                        is_dir=False,
                        part=parts[-1],
                        offset=part_pos,
                        length=size,
                        modification_time_ms=_mtime_ms(info),
                        permission=_FILE_PERMISSION,
                        owner=owner,
                        group=group,
                    )
                )
                part_pos += size
                total += size
        finally:
            if out is not None:
                out.close()
        index, master = _index_bytes(entries)
        # _index first: HarFileSystem needs both, and a reader racing us sees no
        # _masterindex until the index it points into is complete.
        with fs.open_output_stream(posixpath.join(archive_dir, "_index"), compression=None) as f:
            f.write(index)
        with fs.open_output_stream(
            posixpath.join(archive_dir, "_masterindex"), compression=None
        ) as f:
            f.write(master)
    except BaseException:
        delete_dir_quietly(fs, archive_dir)
        raise
    return HarInfo(
        archive_dir=archive_dir,
        version=HAR_VERSION,
        parts=tuple(parts),
        files=len(files),
        directories=len(entries) - len(files),
        bytes=total,
        entries=tuple(sorted(entries, key=lambda e: (har_hash(e.path), e.path))),
        sha256=digests,
    )


# --------------------------------------------------------------------------- reading


def _read_all(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path, compression=None) as f:
        data: bytes = f.read()
    return data


def _parse_entry(line: str) -> HarEntry:
    fields = line.split(" ")
    while fields and fields[-1] == "":  # Java's split drops trailing empty strings
        fields.pop()
    if len(fields) < 5:
        raise HarError(f"malformed _index line: {line!r}")
    path = java_url_decode(fields[0])
    is_dir = fields[1] == "dir"
    props_field = fields[2] if is_dir else (fields[5] if len(fields) > 5 else "")
    mtime, permission, owner, group = 0, 0, "", ""
    props = java_url_decode(props_field).split(" ") if props_field else []
    if len(props) >= 4:
        mtime = int(props[0])
        permission = int(props[1])
        owner = java_url_decode(props[2])
        group = java_url_decode(props[3])
    if is_dir:
        return HarEntry(
            path=path,
            is_dir=True,
            modification_time_ms=mtime,
            permission=permission,
            owner=owner,
            group=group,
            children=tuple(java_url_decode(c) for c in fields[5:]),
        )
    return HarEntry(
        path=path,
        is_dir=False,
        part=fields[2],
        offset=int(fields[3]),
        length=int(fields[4]),
        modification_time_ms=mtime,
        permission=permission,
        owner=owner,
        group=group,
    )


def list_har(fs: pafs.FileSystem, archive_dir: str) -> list[HarEntry]:
    """Read an archive's index the way ``HarFileSystem`` does; entries in index order.

    Only version 3 is accepted. The master index's byte ranges are followed (so an index
    line outside every range is not seen, exactly as in Hadoop).
    """
    archive_dir = archive_dir.rstrip("/")
    try:
        master = _read_all(fs, posixpath.join(archive_dir, "_masterindex")).decode("utf-8")
        index = _read_all(fs, posixpath.join(archive_dir, "_index"))
    except FileNotFoundError as exc:
        raise HarError(f"not a Hadoop Archive (no index): {archive_dir}") from exc
    lines = master.split("\n")
    version = int(lines[0].split(" ")[0])
    if version != HAR_VERSION:
        raise HarError(f"unsupported HAR version {version} in {archive_dir}")
    entries: list[HarEntry] = []
    for line in lines[1:]:
        if not line.strip():
            continue
        fields = line.split(" ")
        begin, end = int(fields[2]), int(fields[3])
        for raw in index[begin:end].decode("utf-8").split("\n"):
            if raw:
                entries.append(_parse_entry(raw))
    return entries


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


def _verify(fs: pafs.FileSystem, info: HarInfo) -> None:
    entries = {e.path: e for e in list_har(fs, info.archive_dir)}
    for path, expected in info.sha256.items():
        entry = entries.get(path)
        if entry is None or entry.is_dir:
            raise HarError(f"{path} missing from archive {info.archive_dir}")
        digest = hashlib.sha256()
        remaining = entry.length
        offset = entry.offset
        with fs.open_input_file(posixpath.join(info.archive_dir, entry.part)) as f:
            while remaining > 0:
                chunk = f.read_at(min(_COPY_CHUNK, remaining), offset)
                if not chunk:
                    break
                digest.update(chunk)
                offset += len(chunk)
                remaining -= len(chunk)
        if remaining or digest.hexdigest() != expected:
            raise HarError(f"archived copy of {path} differs from the original")


# --------------------------------------------------------------------------- partitions


def archive_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    policy: CompactionPolicy,
    storage_format: str | None = None,
    base_uri: str | None = None,
    _corrupt_hook: Callable[[pafs.FileSystem, str], None] | None = None,
) -> PartitionCompaction:
    """Pack a partition's data files into ``<directory>/_hcat_archive.har``.

    Every visible file (names not starting with ``_`` or ``.``) is archived — also those
    at or above ``policy.small_file_bytes``, since the partition's location moves into the
    archive. The archive is built under a hidden temporary name, renamed to
    ``_hcat_archive.har``, verified (each archived file's bytes, via the index as
    ``HarFileSystem`` reads it, hash equal to the original's), and only then are the
    originals deleted and the manifest ``_hcat_compaction.json`` written. On a mismatch
    the archive is removed, the originals stay and :class:`HarError` names the partition.

    ``storage_format`` (``"parquet"``/``"orc"``) only adds row counts to the result and
    manifest. The result's ``new_location`` is the ``har://`` URI of the archive's root
    (:func:`har_uri`), to be registered as the partition's location; ``base_uri`` is
    passed to :func:`filesystem_uri` for filesystems that need it. ``_corrupt_hook``
    (tests only) is called with ``(fs, part file path)`` before verification.
    """
    if policy.mode != "har":
        raise HarError(f"policy mode is {policy.mode!r}, not 'har' ({directory})")
    started = time.monotonic()
    directory = directory.rstrip("/")
    final_dir = posixpath.join(directory, ARCHIVE_NAME)
    if fs.get_file_info(final_dir).type != pafs.FileType.NotFound:
        raise HarError(f"partition {directory} is already archived ({final_dir} exists)")
    originals = list_data_files(fs, directory)
    if not originals:
        raise HarError(f"no data files to archive in partition {directory}")
    rows_by_name: dict[str, int | None] = {}
    for stat in originals:
        rows_by_name[stat.name] = (
            parquet_or_orc_rows(fs, stat.path, storage_format) if storage_format else None
        )
    temp_dir = posixpath.join(directory, f".hcat-har-{uuid.uuid4().hex}.har")
    info = create_har(fs, directory, temp_dir, names=[s.name for s in originals])
    try:
        fs.move(temp_dir, final_dir)
    except BaseException:
        delete_dir_quietly(fs, temp_dir)
        raise
    info = dataclasses.replace(info, archive_dir=final_dir)
    try:
        if _corrupt_hook is not None:
            for part in info.parts:
                _corrupt_hook(fs, posixpath.join(final_dir, part))
        _verify(fs, info)
    except HarError as exc:
        delete_dir_quietly(fs, final_dir)
        raise HarError(
            f"archive verification failed for partition {directory}: {exc}; "
            "originals kept, archive removed"
        ) from exc
    except BaseException:
        delete_dir_quietly(fs, final_dir)
        raise
    location = har_uri(filesystem_uri(fs, final_dir, base_uri=base_uri))
    manifest = write_manifest(
        fs,
        directory,
        {
            "mode": "har",
            "storage_format": storage_format,
            "archive": ARCHIVE_NAME,
            "location": location,
            "parts": list(info.parts),
            "originals": [
                {"name": s.name, "size": s.size, "rows": rows_by_name[s.name]} for s in originals
            ],
            "archived": [
                {"path": e.path, "part": e.part, "offset": e.offset, "length": e.length}
                for e in info.entries
                if not e.is_dir
            ],
        },
    )
    for stat in originals:
        delete_data_file(fs, stat.path)
    known = [r for r in rows_by_name.values() if r is not None]
    part_bytes = sum(fs.get_file_info(posixpath.join(final_dir, p)).size or 0 for p in info.parts)
    return PartitionCompaction(
        directory=directory,
        mode="har",
        files_before=len(originals),
        files_after=len(info.parts),
        bytes_before=sum(s.size for s in originals),
        bytes_after=part_bytes,
        rows=sum(known) if storage_format and len(known) == len(originals) else None,
        checksum=None,
        seconds=time.monotonic() - started,
        new_location=location,
        manifest_path=manifest,
        new_files=tuple(info.parts),
    )
