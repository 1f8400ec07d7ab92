"""Hadoop path strings, as Hive stores locations: split, archives, ``..`` segments.

Pure functions over the text, no filesystem: :mod:`hcat_notify.files` resolves locations
on a filesystem and :mod:`hcat_notify.warehouse` checks them against the operator's
warehouse roots; both start here.
"""

from __future__ import annotations

__all__ = ["has_parent_segment", "split_location", "storage_location"]


def split_location(location: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a Hadoop path string, as ``org.apache.hadoop.fs.Path``
    splits it: the scheme ends at the first ``:`` before any ``/``, an authority follows
    ``//``; nothing is decoded. A plain path has scheme and authority ``""``."""
    colon = location.find(":")
    slash = location.find("/")
    if colon <= 1 or (slash != -1 and slash < colon):  # no scheme (or a drive letter)
        return "", "", location
    scheme, rest = location[:colon], location[colon + 1 :]
    if rest.startswith("//"):
        end = rest.find("/", 2)
        authority, path = (rest[2:], "/") if end == -1 else (rest[2:end], rest[end:])
        return scheme, authority, path
    return scheme, "", rest


def storage_location(location: str) -> str:
    """Where a location's files are stored: for ``har://<scheme>-<authority>/…/x.har[/inner]``
    (a Hadoop Archive, as ``HarFileSystem`` names it) the archive directory on the
    underlying filesystem, else ``location`` itself."""
    scheme, authority, path = split_location(location)
    if scheme != "har":
        return location
    under, _, host = authority.partition("-")
    segments = path.split("/")
    archive = next((i for i, s in enumerate(segments) if s.endswith(".har")), len(segments) - 1)
    path = "/".join(segments[: archive + 1])
    return f"file://{path}" if under == "file" else f"{under}://{host}{path}"


def has_parent_segment(location: str) -> bool:
    """Whether the path of ``location`` has a ``..`` segment (``/a/../b``, ``../x``)."""
    return ".." in split_location(location)[2].split("/")
