"""The warehouse boundary: where managed data may live, and what a purge may delete.

The operator names one or more warehouse roots (``warehouse_roots``; default
``<home>/warehouse``). A managed table's location and every partition location of a
managed table must lie strictly inside one of them, also once symlinks are resolved; an
external table's may lie anywhere, and its data is never deleted. Every location, managed
or external, is refused when it has a ``..`` segment or names a filesystem's root. The
same roots are checked again right before a purge deletes anything, so a location
registered before the roots were configured (or with the operator's explicit
``outside_warehouse``) is never deleted either. docs/operations.md, "Warehouse roots".
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass

from hcat_notify.config import Settings
from hcat_notify.errors import InvalidInputError, LocationOutsideWarehouseError
from hcat_notify.model.locations import has_parent_segment, split_location, storage_location

__all__ = [
    "LocationKey",
    "Warehouse",
    "check_location_shape",
    "location_key",
]

logger = logging.getLogger(__name__)

_LOCAL_SCHEMES = ("", "file")
_BUCKET_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


@dataclass(frozen=True)
class LocationKey:
    """A directory's identity across spellings: ``/w/t``, ``file:/w/t`` and
    ``file:///w/t`` are one key; ``s3a://b/k`` and ``s3://b/k`` too (the bucket becomes
    the first path segment). ``authority`` is the host of other schemes, port dropped."""

    scheme: str
    authority: str
    path: str

    def within(self, other: LocationKey, *, strict: bool = False) -> bool:
        """Whether this directory is ``other`` or lies below it (``strict``: below only).

        Authorities are compared only when both name one: ``hdfs:///w`` (the default
        filesystem) and ``hdfs://nn/w`` may be the same directory.
        """
        if self.scheme != other.scheme:
            return False
        if self.authority and other.authority and self.authority != other.authority:
            return False
        if self.path == other.path:
            return not strict
        return self.path.startswith(other.path.rstrip("/") + "/")


def location_key(location: str, *, resolve: bool = True) -> LocationKey:
    """The :class:`LocationKey` of a location (of the archive directory, for ``har://``).

    Args:
        location: a path or Hadoop path string.
        resolve: resolve symlinks of a local path (``os.path.realpath``: the existing
            part of the path is followed, the rest taken as written).
    """
    scheme, authority, path = split_location(storage_location(location))
    scheme = scheme.lower()
    if scheme in _LOCAL_SCHEMES:
        absolute = os.path.abspath(os.path.expanduser(path))
        return LocationKey("file", "", os.path.realpath(absolute) if resolve else absolute)
    if scheme in _BUCKET_SCHEMES:
        return LocationKey(
            _BUCKET_SCHEMES[scheme], "", posixpath.normpath(f"/{authority}/{path.lstrip('/')}")
        )
    host = authority.rpartition("@")[2].partition(":")[0].lower()
    return LocationKey(scheme, host, posixpath.normpath("/" + path.lstrip("/")))


def check_location_shape(location: str, *, what: str = "location") -> None:
    """Refuse what no table or partition may be at, managed or external: a ``..``
    segment, or a filesystem's (or bucket's) root.

    Raises:
        InvalidInputError: naming ``what`` and the problem.
    """
    if has_parent_segment(location):
        raise InvalidInputError(
            f"{what} {location!r} has a '..' segment; give the directory it means"
        )
    key = location_key(location, resolve=False)
    root_depth = 1 if key.scheme in _BUCKET_SCHEMES.values() else 0
    if len([segment for segment in key.path.split("/") if segment]) <= root_depth:
        raise InvalidInputError(
            f"{what} {location!r} is the root of its filesystem; a table or partition "
            "needs a directory of its own"
        )


@dataclass(frozen=True)
class Warehouse:
    """The operator's warehouse roots, as locations (see the module's docstring).

    Build it with :meth:`of`; ``roots`` are the configured spellings, for messages.
    """

    roots: tuple[str, ...]

    @classmethod
    def of(cls, settings: Settings) -> Warehouse:
        """The roots ``settings`` configure (``<home>/warehouse`` when none are)."""
        return cls(settings.warehouse)

    def _root_keys(self, *, resolve: bool) -> list[LocationKey]:
        return [location_key(root, resolve=resolve) for root in self.roots]

    def _shown(self) -> str:
        return ", ".join(self.roots)

    def contains(self, location: str) -> bool:
        """Whether ``location``, symlinks resolved, lies strictly inside a root."""
        key = location_key(location)
        return any(key.within(root, strict=True) for root in self._root_keys(resolve=True))

    def check(
        self,
        location: str,
        *,
        external: bool = False,
        outside_warehouse: bool = False,
        what: str = "location",
    ) -> None:
        """Refuse a location a caller may not register.

        Args:
            location: the location to register.
            external: the data is an external table's: any place is allowed (it is
                never deleted), but not a ``..`` segment or a filesystem's root.
            outside_warehouse: the operator's explicit exception (the command line's
                ``--outside-warehouse``): allowed, and logged; still never deleted.
            what: how messages name the location (``location of table web.clicks``).

        Raises:
            InvalidInputError: a ``..`` segment, or a filesystem's root.
            LocationOutsideWarehouseError: a managed location outside every root, or
                one that resolves through a symlink to outside them.
        """
        check_location_shape(location, what=what)
        if external or self.contains(location):
            return
        if outside_warehouse:
            logger.warning(
                "%s %s is outside the warehouse roots (%s): registered as asked "
                "(--outside-warehouse); no purge will delete it",
                what,
                location,
                self._shown(),
            )
            return
        written = location_key(location, resolve=False)
        if any(written.within(root, strict=True) for root in self._root_keys(resolve=False)):
            resolved = location_key(location)
            raise LocationOutsideWarehouseError(
                f"{what} {location!r} resolves through a symlink to {resolved.path}, "
                f"outside the warehouse roots ({self._shown()}); nothing was registered"
            )
        raise LocationOutsideWarehouseError(
            f"{what} {location!r} is outside the warehouse roots ({self._shown()}); "
            "register it under one of them, or as an external table (whose data no purge "
            "deletes); nothing was registered"
        )
