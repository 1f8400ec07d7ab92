"""The HAR index format: :class:`HarEntry` (one ``_index`` line), its parsing, and the
``_index``/``_masterindex`` pair of an archive (version 3, as ``HarFileSystem`` reads it)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from spark_output.compaction.har.codec import har_hash, java_url_decode, java_url_encode
from spark_output.errors import HarError

__all__ = [
    "DIR_PERMISSION",
    "FILE_PERMISSION",
    "HAR_VERSION",
    "INDEX_BLOCK_ENTRIES",
    "HarEntry",
    "index_bytes",
    "index_order",
    "is_part_name",
    "parse_entry",
]

HAR_VERSION = 3
"""The archive version we write (``HarFileSystem.VERSION``)."""

INDEX_BLOCK_ENTRIES = 1000
"""Entries per ``_masterindex`` line (``HArchivesReducer.numIndexes``)."""

FILE_PERMISSION = 0o644
"""Permission recorded for archived files (``HarFileSystem`` does not use it)."""

DIR_PERMISSION = 0o755
"""Permission recorded for archived directories."""


_PART_NAME = re.compile(r"part-[0-9]+")


def is_part_name(name: str) -> bool:
    """Whether ``name`` is a part file's: ``part-N``, as our writer and Hadoop's
    ``HadoopArchives`` name them (one plain name inside the archive, never a path)."""
    return _PART_NAME.fullmatch(name) is not None


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
    permission: int = FILE_PERMISSION
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


def index_order(entries: Sequence[HarEntry]) -> list[HarEntry]:
    """``entries`` in the order of ``_index``: by :func:`har_hash` of the path, then path."""
    return sorted(entries, key=lambda e: (har_hash(e.path), e.path))


def index_bytes(entries: Sequence[HarEntry]) -> tuple[bytes, bytes]:
    """``_index`` and ``_masterindex`` contents for ``entries`` (sorted here)."""
    index = bytearray()
    master = bytearray(f"{HAR_VERSION} \n".encode())
    start_hash = 0
    start_pos = 0
    written = 0
    last_hash = 0
    for entry in index_order(entries):
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


def parse_entry(line: str) -> HarEntry:
    """One ``_index`` line (without its newline) as :class:`HarEntry`.

    Raises:
        HarError: the line is malformed: too few fields, a number that is not one, a
            negative offset or length, or a part that is not a ``part-N`` name inside
            the archive.
    """
    try:
        return _parse_entry(line)
    except ValueError as exc:  # int() of a field that is not a number
        raise HarError(f"malformed _index line {line[:200]!r}: {exc}") from exc


def _parse_entry(line: str) -> HarEntry:
    fields = line.split(" ")
    while fields and fields[-1] == "":  # Java's split drops trailing empty strings
        fields.pop()
    if len(fields) < 5:
        raise HarError(f"malformed _index line: {line[:200]!r}")
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
    if not is_part_name(fields[2]):
        raise HarError(
            f"_index entry {path!r} names the part {fields[2][:200]!r}: a part is a file "
            "part-N inside the archive"
        )
    offset, length = int(fields[3]), int(fields[4])
    if offset < 0 or length < 0:
        raise HarError(f"_index entry {path!r} has a negative offset or length")
    return HarEntry(
        path=path,
        is_dir=False,
        part=fields[2],
        offset=offset,
        length=length,
        modification_time_ms=mtime,
        permission=permission,
        owner=owner,
        group=group,
    )
