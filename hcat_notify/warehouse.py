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
import re
from dataclasses import dataclass

from hcat_notify.config import Settings
from hcat_notify.errors import InvalidInputError, LocationOutsideWarehouseError
from hcat_notify.model.locations import has_parent_segment, split_location, storage_location

__all__ = [
    "LocationKey",
    "Warehouse",
    "canonical_location",
    "check_location_shape",
    "key_outside",
    "key_text",
    "location_key",
    "location_spellings",
    "names_another_host",
]

logger = logging.getLogger(__name__)

# spark_output.commit.moves's STAGING_DIR and TRASH_DIR (a layer above this module)
_JOB_DIRECTORIES = ("_hcat_staging", "_hcat_trash")
_LOCAL_SCHEMES = ("", "file", "local")  # pyarrow's local:// is the local filesystem
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_BUCKET_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
# the user part of an authority is the container here (abfss://container@account/...)
_CONTAINER_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")
# object stores: a location names its bucket (or container's account) as the authority
_OBJECT_STORE_SCHEMES = (*_BUCKET_SCHEMES, *_CONTAINER_SCHEMES, "adl", "oss", "cos", "cosn")


@dataclass(frozen=True)
class LocationKey:
    """A directory's identity across spellings: ``/w/t``, ``file:/w/t``, ``file:///w/t``
    and pyarrow's ``local:///w/t`` are one key; ``s3a://b/k`` and ``s3://b/k`` too (the
    bucket becomes the first path segment). ``authority`` is the host of other schemes,
    port dropped (for Azure's ``abfs[s]``/``wasb[s]``: ``container@host``, the container
    being part of the directory's identity)."""

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

    @property
    def text(self) -> str:
        """The key as the catalog indexes it (``file:///w/t``, ``s3:///bucket/k``,
        ``hdfs://nn/w``): a directory inside this one has a key starting with this text
        and ``/``."""
        return f"{self.scheme}://{self.authority}{self.path}"

    def overlaps(self, other: LocationKey) -> bool:
        """Whether one of the two directories is the other or lies inside it."""
        return self.within(other) or other.within(self)

    def ancestors(self) -> list[LocationKey]:
        """This directory and every directory that contains it, innermost first."""
        found = [self]
        path = self.path
        while (parent := posixpath.dirname(path)) != path:  # "//" is its own parent
            path = parent
            found.append(LocationKey(self.scheme, self.authority, path))
        return found


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
    user, _, host = authority.rpartition("@")
    host = host.partition(":")[0].lower()
    if user and scheme in _CONTAINER_SCHEMES:
        host = f"{user.lower()}@{host}"
    return LocationKey(scheme, host, posixpath.normpath("/" + path.lstrip("/")))


def names_another_host(location: str) -> bool:
    """Whether ``location`` is a ``file:`` or ``local:`` URI naming a host other than
    ``localhost`` (refused since it is registered; an older version stored such as
    given): no purge deletes it (docs/operations.md, "Warehouse roots")."""
    scheme, authority, _ = split_location(location)
    return scheme.lower() in _LOCAL_SCHEMES[1:] and authority.lower() not in ("", "localhost")


def key_text(location: str) -> str:
    """The text the catalog indexes a stored location by (:attr:`LocationKey.text`,
    symlinks not resolved: a stored location is resolved already), or ``""`` for one
    that names no directory: a relative path, or another host's ``file:`` URI without a
    path below its root. Another host's ``file://h/x`` is keyed as the local ``/x``: it
    may be that directory, so every purge keeps it (its own never deletes it)."""
    scheme, _, path = split_location(storage_location(location))
    if scheme.lower() in _LOCAL_SCHEMES and not path.startswith("/"):
        return ""
    if names_another_host(location) and not path.strip("/"):
        return ""
    return location_key(location, resolve=False).text


def key_outside(key: str, table_key: str) -> str | None:
    """``key`` (:func:`key_text`) when it lies outside its table's (``table_key``), else
    None (what a partition row keeps as ``outside_key``). A key naming no directory is
    None too."""
    if not key:
        return None
    if table_key and (key == table_key or key.startswith(table_key.rstrip("/") + "/")):
        return None
    return key


def location_spellings(key: LocationKey) -> list[str]:
    """The texts a catalog may hold for the directory ``key``: ``/w/t``,
    ``file:///w/t``, ``file:/w/t`` (``s3://``, ``s3a://``, ``s3n://`` for a bucket), each
    with and without a trailing ``/``. For an exact lookup (``location IN (...)``)."""
    path = key.path
    if key.scheme == "file":
        texts = [path, f"file://{path}", f"file:{path}", f"file://localhost{path}"]
        texts.append(f"local://{path}")
    elif key.scheme in _BUCKET_SCHEMES.values():
        schemes = [name for name, family in _BUCKET_SCHEMES.items() if family == key.scheme]
        texts = [f"{scheme}:/{path}" for scheme in schemes]
    else:
        texts = [f"{key.scheme}://{key.authority}{path}", f"{key.scheme}://{path}"]
        texts.append(f"{key.scheme}:{path}")
    return [spelling for text in texts for spelling in (text, text.rstrip("/") + "/")]


def canonical_location(
    location: object, *, what: str, relative: bool = False, strip: bool = False
) -> str:
    """A location as the catalog stores it: a local one as its real path (symlinks
    resolved: every spelling of a directory is then one text), ``file:`` and pyarrow's
    ``local:`` URIs (any case) as ``file://`` and that path; other URIs as given, without
    a trailing ``/``.

    Args:
        location: the location given.
        what: how messages name it (``table location``).
        relative: a plain path may be relative (resolved against the working directory;
            ``~`` against the home directory); else it must be absolute.
        strip: drop leading and trailing white space (a table's location; a partition's
            directory name may end with a space, as Spark writes a value that does).

    Raises:
        InvalidInputError: empty, a control character (NUL, newline, ...), a relative
            path (unless ``relative``), a URI without a path, a ``..`` segment, a
            filesystem's root, or a ``file:``/``local:`` URI naming another host or a
            relative path.
    """
    if not (isinstance(location, str) and location.strip()):
        raise InvalidInputError(f"{what} is empty: give a directory path or URI")
    stripped = location.strip() if strip else location
    control = _CONTROL.search(stripped)
    if control is not None:
        char = control.group()
        name = "a NUL character" if char == "\x00" else f"the control character U+{ord(char):04X}"
        raise InvalidInputError(f"{what} {location!r} contains {name}; nothing was registered")
    check_location_shape(stripped, what=what)
    scheme, authority, path = split_location(stripped)
    if not scheme:
        if not relative and not stripped.startswith("/"):
            raise InvalidInputError(
                f"{what} {location!r} is a relative path; give an absolute path or a URI "
                "(a relative one would depend on the working directory of each reader)"
            )
        return os.path.realpath(os.path.abspath(os.path.expanduser(stripped)))
    if not path.strip("/"):
        raise InvalidInputError(f"{what} {location!r} is a URI without a path")
    if scheme.lower() in _LOCAL_SCHEMES:
        if authority.lower() not in ("", "localhost"):
            raise InvalidInputError(
                f"{what} {location!r} names the host {authority!r}; a local path names "
                "none (give file:///path)"
            )
        if not path.startswith("/"):
            raise InvalidInputError(
                f"{what} {location!r} is a relative path; give an absolute one (file:///path)"
            )
        return "file://" + os.path.realpath(posixpath.normpath(path))
    if scheme == "har" and authority.lower() in ("file-", "file-localhost"):  # local archive
        archive = split_location(storage_location(stripped))[2]
        inner = path[len(archive) :]
        real = os.path.realpath(posixpath.normpath(archive))
        return f"{scheme}://{authority}{real}{inner}".rstrip("/")
    return stripped.rstrip("/")


def check_location_shape(location: str, *, what: str = "location") -> None:
    """Refuse what no table or partition may be at, managed or external: nothing, a
    ``..`` segment, a filesystem's (or bucket's) root, an object store's URI without a
    bucket, or a path through a table's hidden job directories (``_hcat_staging``,
    ``_hcat_trash``).

    Raises:
        InvalidInputError: naming ``what`` and the problem (an empty one too).
    """
    if not location.strip():
        raise InvalidInputError(f"{what} is empty: give a directory path or URI")
    if has_parent_segment(location):
        raise InvalidInputError(
            f"{what} {location!r} has a '..' segment; give the directory it means"
        )
    scheme, authority, path = split_location(storage_location(location))
    hidden = [segment for segment in path.split("/") if segment in _JOB_DIRECTORIES]
    if hidden:
        raise InvalidInputError(
            f"{what} {location!r} has a {hidden[0]!r} segment: that is a table's hidden "
            "job directory (a write's staging or trash), which its cleanup deletes; "
            "nothing was registered"
        )
    if scheme.lower() in _OBJECT_STORE_SCHEMES and not authority:
        raise InvalidInputError(
            f"{what} {location!r} names no bucket or container ({scheme}://<bucket>/path)"
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

    def spellings(self, key: LocationKey) -> list[LocationKey]:
        """``key`` and its other spellings through the roots: a directory inside a root
        written through a symlink (``/home/w`` -> ``/data/w``) is also ``/data/w/...``,
        and the other way round (catalog rows written before locations were stored
        resolved)."""
        found = [key]
        for root in self.roots:
            written, resolved = location_key(root, resolve=False), location_key(root)
            for one, other in ((written, resolved), (resolved, written)):
                if one != other and key.within(one):
                    found.append(LocationKey(key.scheme, key.authority,
                                             other.path + key.path[len(one.path):]))  # fmt: skip
        return list(dict.fromkeys(found))

    def written_inside(self, location: str) -> bool:
        """Whether ``location`` as written (symlinks not resolved) is, or lies inside, a
        root: where :meth:`contains` then says no, a symlink takes it out of the roots
        (or it is a root)."""
        written = location_key(location, resolve=False)
        return any(written.within(root) for root in self._root_keys(resolve=False))

    def contains(self, location: str) -> bool:
        """Whether ``location``, symlinks resolved, lies strictly inside a root, and is
        not a root nor holds one (nested roots: a purge never deletes a whole root)."""
        if names_another_host(location):
            return False  # stored by an older version: whose directory it is is unsure
        key = location_key(location)
        roots = self._root_keys(resolve=True)
        # a host on one side only is not the same filesystem here: hdfs:///w/t (the
        # default filesystem) is not inside hdfs://nn/w
        return any(
            key.within(root, strict=True) and key.authority == root.authority for root in roots
        ) and not any(root.within(key) for root in roots)

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
                never deleted), but not a ``..`` segment, a filesystem's root, nor a
                warehouse root or a directory holding one.
            outside_warehouse: the operator's explicit exception (the command line's
                ``--outside-warehouse``): allowed, and logged; still never deleted.
            what: how messages name the location (``location of table web.clicks``).

        Raises:
            InvalidInputError: a ``..`` segment, a filesystem's root, or an external
                location that is or holds a warehouse root.
            LocationOutsideWarehouseError: a managed location outside every root, or
                one that resolves through a symlink to outside them.
        """
        check_location_shape(location, what=what)
        if external:
            resolved = location_key(location)
            held = [root for root, key in zip(self.roots, self._root_keys(resolve=True),
                                              strict=True) if key.within(resolved)]  # fmt: skip
            if held:  # every purge in that root would keep its data for it
                raise InvalidInputError(
                    f"{what} {location!r} is or holds the warehouse root {held[0]}; an "
                    "external location may lie anywhere but around the warehouse; nothing "
                    "was registered"
                )
            return
        if self.contains(location):
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
        resolved = location_key(location)
        held = [root for root, key in zip(self.roots, self._root_keys(resolve=True), strict=True)
                if key.within(resolved)]  # fmt: skip
        if held and any(resolved.within(key) for key in self._root_keys(resolve=True)):
            raise LocationOutsideWarehouseError(
                f"{what} {location!r} is or holds the warehouse root {held[0]} (roots: "
                f"{self._shown()}); a table or partition needs a directory inside one; "
                "nothing was registered"
            )
        written = location_key(location, resolve=False)
        if any(written.within(root, strict=True) for root in self._root_keys(resolve=False)):
            raise LocationOutsideWarehouseError(
                f"{what} {location!r} resolves through a symlink to {resolved.path}, "
                f"outside the warehouse roots ({self._shown()}); nothing was registered"
            )
        raise LocationOutsideWarehouseError(
            f"{what} {location!r} is outside the warehouse roots ({self._shown()}); "
            "register it under one of them, or as an external table (whose data no purge "
            "deletes); nothing was registered"
        )
