"""Purging the directories compactions superseded (``hcat-notify compact --purge``).

A compaction leaves a partition's old directory in place for readers that listed it
before the switch, with a superseded marker. :func:`purge_superseded` deletes such a
directory once that is safe: the marker is old enough, nothing is registered there, the
data lives on at the new location, and nothing was written into it after the switch.
The rules and their reasons are described in docs/compaction.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import pyarrow.fs as pafs

from hcat_notify import (
    Catalog,
    InvalidInputError,
    OpenedDir,
    PartitionInfo,
    PartitionSpec,
    TableInfo,
    TreeEntry,
    UnsafeDeleteError,
    list_tree,
    open_below,
    reason_to_keep,
    warehouse_bases,
)
from spark_output.compaction.har.locations import archive_storage_location
from spark_output.compaction.manifest import MANIFEST_NAME
from spark_output.errors import CompactionError
from spark_output.fs import (
    TableLocation,
    crc_sidecar,
    remove_empty_dir,
    split_location,
)
from spark_output.maintenance.marker import SUPERSEDED_MARKER, Marker, MarkerError, read_marker
from spark_output.maintenance.table_compaction import COMPACTED_DIR, ProgressCallback

__all__ = ["DEFAULT_PURGE_AGE", "PurgeResult", "PurgeSummary", "purge_superseded"]

logger = logging.getLogger(__name__)

DEFAULT_PURGE_AGE = timedelta(hours=1)
"""How long a superseded directory is kept after its switch before :func:`purge_superseded`
deletes it: time for readers that listed it before the switch to finish their scan."""

PurgeStatus = Literal["deleted", "planned", "kept", "refused", "failed"]

_MAX_CHAIN = 64
"""Hops followed from a superseded directory through newer markers to a live location."""


@dataclass(frozen=True)
class PurgeResult:
    """What happened to one candidate directory.

    ``status``: ``deleted``; ``planned`` (dry run: would be deleted); ``kept`` (normal:
    the marker is too recent, the directory is registered, or it was never superseded);
    ``refused`` (something is off and it needs a look: its new location does not exist, an
    unreadable marker, data files the compaction did not cover); ``failed`` (the deletion
    itself failed, possibly part-way: the marker is deleted last, so a later purge sees the
    directory again). ``reason`` says why for every status but ``deleted``/``planned``.
    ``files``/``bytes`` count every file in the directory (hidden ones too);
    ``bytes_freed`` leaves out files that stay hard-linked elsewhere (a compacted copy
    shares the inodes of the files it kept as they were).
    """

    location: str
    spec: str
    status: PurgeStatus
    superseded_by: str | None = None
    superseded_at: datetime | None = None
    files: int = 0
    bytes: int = 0
    bytes_freed: int = 0
    reason: str = ""


@dataclass(frozen=True)
class PurgeSummary:
    """What :func:`purge_superseded` did (or, with ``dry_run``, would do).

    ``directories_deleted``/``files_deleted``/``bytes_freed`` count the deleted (dry run:
    deletable) directories; ``directories_kept``/``_refused``/``_failed`` the others.
    ``results`` has one entry per superseded or unregistered candidate directory;
    registered, never superseded partition directories are not listed.
    """

    table: str
    dry_run: bool
    older_than: timedelta
    directories_deleted: int
    files_deleted: int
    bytes_freed: int
    directories_kept: int
    directories_refused: int
    directories_failed: int
    seconds: float
    results: tuple[PurgeResult, ...]

    @property
    def ok(self) -> bool:
        """True when nothing was refused and no deletion failed."""
        return self.directories_refused == 0 and self.directories_failed == 0

    @property
    def errors(self) -> tuple[str, ...]:
        """One line per refused or failed directory, naming it and why."""
        return tuple(
            f"{r.status}: {r.location} (partition {r.spec}): {r.reason}"
            for r in self.results
            if r.status in ("refused", "failed")
        )


def _path_key(location: str) -> str:
    """A location's path, for telling whether two locations may be the same directory.

    Scheme and authority are ignored and local paths are resolved, so that two spellings
    of one directory (``/t/p``, ``file:///t/p``, ``hdfs://nn/t/p`` vs ``hdfs://nn:8020/t/p``)
    compare equal: a false match only makes purge keep a directory, never delete one.
    """
    uri = archive_storage_location(location)
    scheme, authority, path = split_location(uri)
    if not scheme:
        return os.path.realpath(os.path.expanduser(uri))
    if scheme in ("s3", "s3a", "s3n", "gs", "gcs"):
        path = f"{authority}/{path.lstrip('/')}"  # pyarrow names these bucket/key
    path = posixpath.normpath("/" + path.lstrip("/"))
    return os.path.realpath(path) if scheme == "file" else path


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _partition_dirs(
    fs: pafs.FileSystem, base: str, keys: Sequence[str], wanted: PartitionSpec | None
) -> list[tuple[str, PartitionSpec]]:
    """The directories ``base/k1=v1/…/kn=vn`` that exist, with their spec, matching
    ``wanted``. Only the key levels are listed, never the partitions' own files."""
    level: list[tuple[str, tuple[tuple[str, str | None], ...]]] = [(base, ())]
    filters = wanted.as_dict() if wanted is not None else {}
    for key in keys:
        deeper = []
        for directory, pairs in level:
            selector = pafs.FileSelector(directory, allow_not_found=True)
            for info in fs.get_file_info(selector):
                if info.type != pafs.FileType.Directory or "=" not in info.base_name:
                    continue
                try:
                    ((name, value),) = PartitionSpec.parse(info.base_name).items
                except (InvalidInputError, ValueError):
                    continue  # not a partition directory of this table
                if name != key or (key in filters and filters[key] != value):
                    continue
                deeper.append((info.path, (*pairs, (name, value))))
        level = deeper
    return sorted(((path, PartitionSpec(pairs)) for path, pairs in level), key=lambda d: d[0])


def _candidate_dirs(
    root: TableLocation, keys: Sequence[str], wanted: PartitionSpec | None
) -> list[tuple[str, PartitionSpec]]:
    """Every directory that may be a partition's old location: ``<table>/<spec>`` and each
    ``<table>/_hcat_compacted/<spec>/<copy>`` (a copy that was itself compacted again)."""
    found = _partition_dirs(root.fs, root.path, keys, wanted)
    for directory, spec in _partition_dirs(root.fs, root.join(COMPACTED_DIR), keys, wanted):
        selector = pafs.FileSelector(directory, allow_not_found=True)
        copies = sorted(
            i.path for i in root.fs.get_file_info(selector) if i.type == pafs.FileType.Directory
        )
        found += [(path, spec) for path in copies]
    return found


def _check_successor(first: str, registered: str | None) -> str | None:
    """None when the data of a superseded directory is safe elsewhere, else why not.

    Safe: following ``superseded_by`` (through the markers of copies that were superseded
    in turn) reaches the partition's registered location, or an existing directory that
    is not superseded itself (so this purge never deletes it).
    """
    location = first
    seen: set[str] = set()
    for _ in range(_MAX_CHAIN):
        key = _path_key(location)
        if registered is not None and key == _path_key(registered):
            return None
        if key in seen:
            return f"its superseded-by chain loops at {location}"
        seen.add(key)
        try:
            where = TableLocation.parse(archive_storage_location(location))
            kind = where.fs.get_file_info(where.path).type
            if kind == pafs.FileType.NotFound:
                return f"its new location {location} does not exist"
            if kind != pafs.FileType.Directory:
                return f"its new location {location} is not a directory"
            marker = read_marker(where.fs, where.path)
        except MarkerError as exc:
            return f"its new location {location} has a bad marker: {exc}"
        except (OSError, ValueError) as exc:
            return f"cannot check its new location {location}: {exc}"
        if marker is None:
            return None
        location = marker.superseded_by
    return f"more than {_MAX_CHAIN} superseded locations follow it"


def _list_directory(fs: pafs.FileSystem, directory: str, bases: Sequence[str]) -> list[TreeEntry]:
    """Every entry under ``directory`` (recursively). On a local filesystem it is reached
    from a warehouse root without following a link, and links below it are listed, never
    followed (:mod:`hcat_notify.safe_delete`).

    Raises:
        UnsafeDeleteError: a link on the way to it, or it is not inside a root.
        OSError: it cannot be listed.
    """
    if isinstance(fs, pafs.LocalFileSystem):
        with open_below(directory, bases) as opened:
            return list_tree(opened.fd)
    return [
        TreeEntry(
            posixpath.relpath(info.path, directory),
            "dir" if info.type == pafs.FileType.Directory else "file",
            int(info.size or 0),
            1,
        )
        for info in fs.get_file_info(pafs.FileSelector(directory, recursive=True))
    ]


def _links(entries: Sequence[TreeEntry]) -> str | None:
    """Why a directory holding symbolic links is refused, or None."""
    links = sorted(entry.path for entry in entries if entry.kind not in ("file", "dir"))
    if not links:
        return None
    shown = ", ".join(links[:3]) + (", ..." if len(links) > 3 else "")
    return (
        f"it holds {len(links)} symbolic link(s) or special file(s) ({shown}); a purge "
        "never deletes through a link: remove them, then purge again"
    )


_SUCCESS = "_SUCCESS"
"""The empty file Spark's committer writes into a directory it completed."""


def _uncovered(entries: Sequence[TreeEntry], marker: Marker) -> str | None:
    """Why the directory holds data the compaction did not cover, or None. Hidden and
    ``_`` entries count too (``_delta_log/``, ``.hoodie/``), except the marker, the
    compaction's manifest (a copy compacted again), Spark's ``_SUCCESS`` and the
    checksum sidecars (``.<name>.crc``) of those and of covered files."""
    known = [SUPERSEDED_MARKER, MANIFEST_NAME, _SUCCESS, *marker.files]
    expected = set(known) | {posixpath.basename(crc_sidecar(name)) for name in known}
    extra = []
    for entry in entries:
        if "/" in entry.path or (entry.kind != "dir" and entry.path in expected):
            continue
        if entry.kind == "dir":
            extra.append(f"{entry.path}/")
        elif marker.files.get(entry.path) != entry.size:
            extra.append(entry.path)
    if not extra:
        return None
    shown = ", ".join(sorted(extra)[:5]) + (", ..." if len(extra) > 5 else "")
    return (
        f"it holds {len(extra)} data file(s) the compaction did not cover ({shown}); "
        "they may have been added after the switch"
    )


@dataclass(frozen=True)
class _Registry:
    """The table's registered partitions, as purge needs them."""

    by_key: Mapping[str, str]
    """:func:`_path_key` of each registered location -> its partition spec."""
    by_spec: Mapping[str, str]
    """Partition spec -> its registered location."""

    @classmethod
    def of(cls, partitions: Sequence[PartitionInfo]) -> _Registry:
        return cls(
            by_key={_path_key(p.location): p.spec.to_path() for p in partitions},
            by_spec={p.spec.to_path(): p.location for p in partitions},
        )

    def holders(self, key: str) -> list[str]:
        """Partitions whose location is the directory ``key``, lies in it or contains it."""
        return sorted(
            spec
            for other, spec in self.by_key.items()
            if _within(other, key) or _within(key, other)
        )


def _age_text(age: timedelta) -> str:
    """``1h``, ``90m``, ``3d``, ``42s``: whole units, the largest that says it exactly or
    at least twice."""
    seconds = max(0, int(age.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and (seconds % size == 0 or seconds >= 2 * size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _judge(
    info: TableInfo,
    root: TableLocation,
    directory: str,
    spec: PartitionSpec,
    marker: Marker | MarkerError | None,
    *,
    registry: _Registry,
    now: datetime,
    older_than: timedelta,
    bases: Sequence[str],
) -> PurgeResult | None:
    """Decide one candidate directory: ``planned`` if it may go, else ``kept``/``refused``;
    None for a registered partition directory that was never superseded (nothing to say)."""
    uri = root.uri_of(directory)
    path = spec.to_path()
    kept = PurgeResult(location=uri, spec=path, status="kept")
    holders = registry.holders(_path_key(uri))
    if isinstance(marker, MarkerError):
        return dataclasses.replace(kept, status="refused", reason=str(marker))
    if marker is None:
        if holders:
            return None
        return dataclasses.replace(kept, reason="not registered, and no superseded marker")
    kept = dataclasses.replace(
        kept, superseded_by=marker.superseded_by, superseded_at=marker.superseded_at
    )
    if holders:
        return dataclasses.replace(
            kept, reason=f"registered again (partition {holders[0]}) although it is superseded"
        )
    if marker.table != str(info.name) or marker.partition != path:
        return dataclasses.replace(
            kept,
            status="refused",
            reason=f"its marker is for partition {marker.partition} of {marker.table}",
        )
    age = now - marker.superseded_at
    if age < older_than:
        return dataclasses.replace(
            kept,
            reason=f"superseded {_age_text(age)} ago; purged once older than "
            f"{_age_text(older_than)}",
        )
    problem = _check_successor(marker.superseded_by, registry.by_spec.get(path))
    if problem is not None:
        return dataclasses.replace(kept, status="refused", reason=problem)
    try:
        entries = _list_directory(root.fs, directory, bases)
    except (UnsafeDeleteError, OSError) as exc:
        return dataclasses.replace(kept, status="refused", reason=f"cannot list it: {exc}")
    problem = _links(entries) or _uncovered(entries, marker)
    if problem is not None:
        return dataclasses.replace(kept, status="refused", reason=problem)
    files = [entry for entry in entries if entry.kind == "file"]
    return dataclasses.replace(
        kept,
        status="planned",
        files=len(files),
        bytes=sum(entry.size for entry in files),
        # a file still linked from a compacted copy frees no space
        bytes_freed=sum(entry.size for entry in files if entry.links <= 1),
        reason="",
    )


def _remove_empty_dir(fs: pafs.FileSystem, directory: str) -> None:
    """Remove ``directory`` only if it is empty; else say what is left in it."""
    if not remove_empty_dir(fs, directory):
        left = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        raise OSError(f"{directory} is not empty: {', '.join(i.base_name for i in left[:3])}")


def _delete_superseded(
    fs: pafs.FileSystem, directory: str, marker: Marker, bases: Sequence[str]
) -> str | None:
    """Delete a superseded directory, checked once more; None when done, else why not.

    Only the files listed now (and found covered by ``marker``) are deleted, one by one,
    the marker last, then the emptied directories: a directory swapped in at this path
    meanwhile (an overwrite of the partition) is never deleted wholesale, and if this
    stops part-way, a later purge still recognises what is left as superseded. On a
    local filesystem the directory is reached, listed and emptied through descriptors,
    never through a link (:mod:`hcat_notify.safe_delete`).

    Raises:
        OSError: a deletion failed.
    """
    try:
        again = read_marker(fs, directory)
    except MarkerError as exc:
        return f"its marker changed while purging: {exc}"
    if again != marker:
        return "its marker changed or went away while purging"
    if isinstance(fs, pafs.LocalFileSystem):
        try:
            with open_below(directory, bases) as opened:
                return _delete_opened(opened, marker)
        except UnsafeDeleteError as exc:
            return str(exc)
    entries = _list_directory(fs, directory, bases)
    problem = _uncovered(entries, marker)
    if problem is not None:
        return problem
    marker_path = posixpath.join(directory, SUPERSEDED_MARKER)
    for entry in entries:
        path = posixpath.join(directory, entry.path)
        if entry.kind == "file" and path != marker_path:
            with contextlib.suppress(FileNotFoundError):  # gone already: fine
                fs.delete_file(path)
    fs.delete_file(marker_path)
    subdirs = [posixpath.join(directory, e.path) for e in entries if e.kind == "dir"]
    for path in sorted(subdirs, key=lambda p: p.count("/"), reverse=True):
        _remove_empty_dir(fs, path)
    _remove_empty_dir(fs, directory)
    return None


def _delete_opened(opened: OpenedDir, marker: Marker) -> str | None:
    """:func:`_delete_superseded` on a local directory opened without following a link."""
    entries = list_tree(opened.fd)
    problem = _links(entries) or _uncovered(entries, marker)
    if problem is not None:
        return problem
    for entry in entries:
        if "/" in entry.path or entry.path == SUPERSEDED_MARKER:
            continue
        with contextlib.suppress(FileNotFoundError):  # gone already: fine
            if entry.kind == "dir":  # a hidden one (others are uncovered)
                shutil.rmtree(entry.path, dir_fd=opened.fd)
            else:
                os.unlink(entry.path, dir_fd=opened.fd)
    os.unlink(SUPERSEDED_MARKER, dir_fd=opened.fd)
    try:
        os.rmdir(opened.name, dir_fd=opened.parent_fd)
    except OSError as exc:
        left = sorted(os.listdir(opened.fd))[:3]
        raise OSError(f"it is not empty: {', '.join(left)}") from exc
    return None


def purge_superseded(
    catalog: Catalog,
    table: str,
    spec: PartitionSpec | Mapping[str, str | None] | None = None,
    *,
    older_than: timedelta = DEFAULT_PURGE_AGE,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    _before_delete: Callable[[str], None] | None = None,
) -> PurgeSummary:
    """Delete the old partition directories that compactions superseded, once it is safe.

    The candidates are the table's partition directories and compacted copies matching
    ``spec``, found by listing the table's directory. One is deleted only if its
    superseded marker is for this partition and older than ``older_than``, nothing is
    registered at, in or above it, its data lives on at the new location, and it holds
    only the files the compaction copied; each is checked again right before its files
    are deleted one by one, the marker last (rules and reasons: docs/compaction.md).

    Args:
        catalog: the open catalog.
        table: ``db.table``.
        spec: a partial spec; None for every partition.
        older_than: how long after its switch a directory is kept for readers that
            listed it before the switch (default :data:`DEFAULT_PURGE_AGE`, one hour).
            Must not be negative; zero purges at once.
        dry_run: decide, but delete nothing: deletable directories are ``planned``.
        progress: called as ``progress(done, total, location)`` after each deletable
            directory is deleted (or, in a dry run, decided).
        _before_delete: tests only: called with a directory's location right before it
            is checked once more and deleted.

    Returns:
        A :class:`PurgeSummary`; refused directories and failed deletions are in it, not
        raised.

    Raises:
        hcat_notify.TableNotFoundError: no such table.
        hcat_notify.InvalidInputError: the spec names keys the table does not have.
        CompactionError: ``older_than`` is negative.
    """
    started = time.monotonic()
    if older_than < timedelta(0):
        raise CompactionError(f"older_than must not be negative, got {older_than}")
    info = catalog.get_table(table)
    wanted = info.spec(spec, partial=True) if spec is not None else None
    root = TableLocation.parse(info.location)
    candidates = _candidate_dirs(root, info.partition_keys, wanted)
    registry = _Registry.of(catalog.list_partitions(info.name))
    bases = warehouse_bases(catalog.settings.warehouse)
    now = datetime.now(UTC)
    results: list[PurgeResult] = []
    deletable: dict[int, tuple[str, Marker]] = {}
    for directory, partition in candidates:
        marker: Marker | MarkerError | None
        try:
            marker = read_marker(root.fs, directory)
        except MarkerError as exc:
            marker = exc
        decided = _judge(
            info,
            root,
            directory,
            partition,
            marker,
            registry=registry,
            now=now,
            older_than=older_than,
            bases=bases,
        )
        if decided is None:
            continue
        if decided.status == "planned" and isinstance(marker, Marker):
            deletable[len(results)] = (directory, marker)
        results.append(decided)
    if deletable and not dry_run:
        # A directory registered again since the first read must not go.
        registry = _Registry.of(catalog.list_partitions(info.name))
    for done, (number, (directory, marker)) in enumerate(deletable.items(), start=1):
        if not dry_run:
            if _before_delete is not None:
                _before_delete(results[number].location)
            results[number] = _purge_one(
                catalog, root.fs, directory, marker, results[number], registry, bases
            )
        if progress is not None:
            progress(done, len(deletable), results[number].location)
    return _purge_summary(str(info.name), results, dry_run, older_than, started)


def _purge_one(
    catalog: Catalog,
    fs: pafs.FileSystem,
    directory: str,
    marker: Marker,
    planned: PurgeResult,
    registry: _Registry,
    bases: Sequence[str],
) -> PurgeResult:
    holders = registry.holders(_path_key(planned.location))
    if holders:
        return dataclasses.replace(
            planned,
            status="kept",
            reason=f"registered again (partition {holders[0]}) although it is superseded",
        )
    why = reason_to_keep(
        catalog, planned.location, table=marker.table
    )  # any table's, and the warehouse roots
    if why is not None:
        return dataclasses.replace(planned, status="kept", reason=why)
    try:
        problem = _delete_superseded(fs, directory, marker, bases)
    except OSError as exc:
        return dataclasses.replace(
            planned, status="failed", reason=f"deleting failed part-way: {exc}"
        )
    if problem is not None:
        return dataclasses.replace(planned, status="refused", reason=problem)
    logger.info("purged %s (%d bytes freed)", planned.location, planned.bytes_freed)
    return dataclasses.replace(planned, status="deleted")


def _purge_summary(
    table: str,
    results: Sequence[PurgeResult],
    dry_run: bool,
    older_than: timedelta,
    started: float,
) -> PurgeSummary:
    gone = [r for r in results if r.status in ("deleted", "planned")]
    for result in results:
        if result.status in ("refused", "failed"):
            logger.warning("not purged: %s: %s", result.location, result.reason)
    return PurgeSummary(
        table=table,
        dry_run=dry_run,
        older_than=older_than,
        directories_deleted=len(gone),
        files_deleted=sum(r.files for r in gone),
        bytes_freed=sum(r.bytes_freed for r in gone),
        directories_kept=sum(1 for r in results if r.status == "kept"),
        directories_refused=sum(1 for r in results if r.status == "refused"),
        directories_failed=sum(1 for r in results if r.status == "failed"),
        seconds=time.monotonic() - started,
        results=tuple(results),
    )
