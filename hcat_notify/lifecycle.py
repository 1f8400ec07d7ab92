"""Lifecycle work that touches files: discovering partitions, dropping with ``--purge``.

:func:`discover_partitions` is Hive's ``MSCK REPAIR TABLE``: it walks a table's location
for ``k=v/...`` directories (decoded exactly as Spark names them) that hold data files
and are not registered, and registers and announces them in one transaction.
:func:`drop_partitions` and :func:`drop_table` unregister and announce first, then (with
``purge``) delete the files: a failed delete leaves files nobody reads, never a registry
that points at nothing. A purge deletes a directory only inside the warehouse roots
(:mod:`hcat_notify.warehouse`) and only when no table or partition still registered uses
it (:func:`location_holders`): what it keeps it says, with why. The registry work itself is
:mod:`hcat_notify.store.table_changes`.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyarrow import fs as pafs

from hcat_notify.errors import InvalidInputError, InvalidSpecError, UnsafeDeleteError
from hcat_notify.files import (
    TableLocation,
    is_hidden,
    list_data_files,
    measure_partitions,
    storage_location,
)
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.safe_delete import identity_of, remove_tree, warehouse_bases
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import NewPartition, PartitionInfo, TableInfo
from hcat_notify.store.table_changes import DroppedPartitions, DroppedTable, Registration
from hcat_notify.store.usage import LocationUse
from hcat_notify.warehouse import Warehouse, key_text, location_key, names_another_host

__all__ = [
    "Discovery",
    "Purge",
    "discover_partitions",
    "drop_partitions",
    "drop_table",
    "location_holders",
    "purge_partitions",
    "reason_to_keep",
    "register_partitions",
]

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]
SpecLike = PartitionSpec | Mapping[str, str | None]


def _no_progress(done: int, total: int, item: str) -> None:
    """The default progress callback: nothing to show."""


@dataclass(frozen=True)
class Discovery:
    """What :func:`discover_partitions` found.

    Attributes:
        table: ``db.table``.
        found: partitions on disk that are not registered (registered now unless a dry run).
        foreign: directories (or files) that are not partitions of the table, with why.
        empty: partition directories without data files (not registered).
        registration: what was registered and announced (None for a dry run, or nothing).
    """

    table: str
    found: tuple[NewPartition, ...]
    foreign: tuple[tuple[str, str], ...]
    empty: tuple[str, ...]
    dry_run: bool
    registration: Registration | None = None


@dataclass
class Purge:
    """What a purge deleted, what it kept on purpose (``kept``: a location and why: outside
    the warehouse roots, or still used by a registered table or partition), and what it
    could not delete (``errors``)."""

    deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _walk(
    table: TableInfo, root: TableLocation, progress: Progress
) -> tuple[list[NewPartition], list[tuple[str, str]], list[str]]:
    keys = table.partition_keys
    found: list[NewPartition] = []
    foreign: list[tuple[str, str]] = []
    empty: list[str] = []
    frontier = [(root.path, 0)]
    listed = 0
    while frontier:
        directory, depth = frontier.pop()
        entries = root.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        listed += 1
        progress(listed, listed + len(frontier), posixpath.relpath(directory, root.path))
        for entry in sorted(entries, key=lambda info: info.base_name):
            if is_hidden(entry.base_name):
                continue  # _SUCCESS, .crc, _hcat_staging, _hcat_compacted, ...
            relative = posixpath.relpath(entry.path, root.path)
            if entry.type != pafs.FileType.Directory:
                if depth < len(keys):
                    foreign.append((relative, "a file outside any partition directory"))
                continue
            if depth >= len(keys):
                continue  # a subdirectory inside a partition: readers do not look there
            try:
                spec = PartitionSpec.parse(relative)  # decodes %XX exactly as Spark does
            except InvalidInputError as exc:
                foreign.append((relative, str(exc)))
                continue
            if spec.keys[-1] != keys[depth]:
                foreign.append(
                    (relative, f"expected {keys[depth]}=VALUE here, found key {spec.keys[-1]!r}")
                )
                continue
            if depth + 1 < len(keys):
                frontier.append((entry.path, depth + 1))
                continue
            try:
                spec = spec.for_table(keys, partial=False)  # the limits of a partition name
            except InvalidInputError as exc:
                foreign.append((relative, str(exc)))
                continue
            # from the table's location: a partition directory, or one above it, that is
            # a link (pyarrow's walk follows it) is refused, never listed
            files = list_data_files(root.fs, entry.path, bases=(root.path,))
            if not files:
                empty.append(relative)
                continue
            found.append(
                NewPartition(
                    spec,
                    root.uri_of(entry.path),
                    file_count=len(files),
                    total_bytes=sum(stat.size for stat in files),
                )
            )
    return found, foreign, empty


def register_partitions(
    catalog: Catalog,
    table: TableName | str,
    locations: Mapping[str, str] | Sequence[tuple[SpecLike, str]],
    *,
    mark_set_done: SpecLike | None = None,
    announce: AnnounceMode | None = None,
    job_id: str | None = None,
    outside_warehouse: bool = False,
) -> Registration:
    """Register partitions whose files a writer other than Spark already put in place.

    Each location is checked against the warehouse roots, then its data files are
    counted and measured (through ``pyarrow.fs``, so HDFS and S3 work); then, in one
    transaction, the partitions are registered and announced (ADD_PARTITION, per
    partition or per write), with the MARK_SET_DONE if asked.

    Args:
        catalog: the catalog.
        table: ``db.table``.
        locations: full spec (``k=v/...`` path form, or a spec/mapping) -> location.
        mark_set_done: a (partial) spec to announce as complete in the same transaction.
        announce: ``partition`` or ``write``; default the table's property.
        job_id: recorded on each partition and message.
        outside_warehouse: the operator's logged exception to the warehouse roots.

    Raises:
        TableNotFoundError: no such table.
        LocationOutsideWarehouseError: a managed table's location outside the roots.
        LocationNotFoundError: a location does not exist or holds no data files.
        InvalidInputError: a spec is not a full spec of the table (unknown key, ...).
        PartitionExistsError: a partition is registered already.
        (Nothing is registered when any of these is raised.)
    """
    pairs = list(locations.items()) if isinstance(locations, Mapping) else list(locations)
    info = catalog.get_table(table)
    if mark_set_done:
        info.done_spec(mark_set_done)  # refused before any location is measured
    new = measure_partitions(
        info, pairs, Warehouse.of(catalog.settings), outside_warehouse=outside_warehouse
    )
    return catalog.partitions.register(
        info.name,
        new,
        mark_set_done=mark_set_done,
        announce=announce,
        job_id=job_id,
        outside_warehouse=outside_warehouse,
    )


def discover_partitions(
    catalog: Catalog,
    table: TableName | str,
    *,
    dry_run: bool = False,
    skip_foreign: bool = False,
    announce: AnnounceMode | None = None,
    progress: Progress = _no_progress,
) -> Discovery:
    """Register (and announce) the partitions on disk that the catalog does not know.

    Like Hive's ``MSCK REPAIR TABLE`` with ``hive.msck.path.validation=throw`` (its
    default): a directory that is not ``key=value`` of the table's next key refuses the
    whole run, unless ``skip_foreign``, which registers the rest and reports them.

    Raises:
        TableNotFoundError: no such table.
        InvalidInputError: the table's location cannot be listed, or (without
            ``skip_foreign``) foreign directories were found; nothing is registered.
    """
    info = catalog.get_table(table)
    try:
        root = TableLocation.parse(info.location)
        found, foreign, empty = _walk(info, root, progress)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot list the location of {info.name}: {exc}") from exc
    if foreign and not skip_foreign:
        where, why = foreign[0]
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise InvalidSpecError(
            f"{info.location} holds {where}{more}, which is not a partition directory of "
            f"{info.name}: {why}; nothing was registered (move it away, or pass "
            "--skip-foreign to register the rest)"
        )
    registered = catalog.partitions.at(info.name, [item.spec for item in found])
    new = tuple(
        item
        for item in found
        if isinstance(item.spec, PartitionSpec) and item.spec.to_path() not in registered
    )
    registration = None
    if new and not dry_run:
        registration = catalog.partitions.register(info.name, new, announce=announce)
    return Discovery(str(info.name), new, tuple(foreign), tuple(empty), dry_run, registration)


def _partition_directory(location: str) -> TableLocation:
    stored = storage_location(location)
    where = TableLocation.parse(stored)
    if stored != location:  # an archive: the partition is the directory that holds it
        return TableLocation(where.fs, posixpath.dirname(where.path), posixpath.dirname(stored))
    return where


def location_holders(
    catalog: Catalog, directories: Sequence[str], *, table: str | None = None
) -> dict[str, list[LocationUse]]:
    """For each directory, the registered tables and partitions that use it: their
    location is it, lies inside it or contains it (in any spelling, symlinks resolved;
    the location of ``table``, the table the directories belong to, does not count as
    containing them). A purge must not delete such a directory
    (:func:`hcat_notify.store.usage.location_holders`)."""
    return catalog.tables.location_holders(directories, table=table)


def _reasons_to_keep(
    catalog: Catalog, locations: Sequence[str], warehouse: Warehouse, table: str | None = None
) -> dict[str, str | None]:
    reasons: dict[str, str | None] = {}
    inside = [location for location in locations if warehouse.contains(location)]
    holders = location_holders(catalog, inside, table=table)
    for location in locations:
        users = holders.get(location)
        if users is None:
            reasons[location] = f"outside the warehouse roots ({', '.join(warehouse.roots)})"
        elif users:
            more = f" and {len(users) - 1} more" if len(users) > 1 else ""
            key, first = location_key(location), location_key(users[0].location)
            how = "lies inside" if key.within(first, strict=True) else "still used by"
            reasons[location] = f"{how} {users[0]}{more}"
        else:
            reasons[location] = None
    return reasons


def reason_to_keep(
    catalog: Catalog,
    location: str,
    warehouse: Warehouse | None = None,
    *,
    table: str | None = None,
) -> str | None:
    """Why no purge may delete the directory ``location``, or None: it is outside the
    warehouse roots (symlinks resolved), or a registered table or partition uses it
    (:func:`location_holders`; ``table``: the table whose data it is, whose own location
    contains it). Every purge asks this before it deletes."""
    warehouse = warehouse or Warehouse.of(catalog.settings)
    return _reasons_to_keep(catalog, [location], warehouse, table)[location]


def _delete_directory(
    catalog: Catalog,
    where: TableLocation,
    shown: str,
    warehouse: Warehouse,
    outcome: Purge,
    table: str | None,
) -> None:
    """Check one directory right before deleting it (:func:`reason_to_keep`; ``table``:
    the table whose data it is, None for a table's own root), then delete it; a local one
    through :func:`hcat_notify.safe_delete.remove_tree` (never through a link, and only
    the directory the check saw). Adds it to ``outcome``."""
    local = isinstance(where.fs, pafs.LocalFileSystem)
    expected = identity_of(where.path) if local else None  # what the check resolves
    why = _reasons_to_keep(catalog, [where.uri], warehouse, table)[where.uri]
    try:
        if why is None and local:
            remove_tree(where.path, warehouse_bases(warehouse.roots), expected=expected)
        elif why is None and where.fs.get_file_info(where.path).type != pafs.FileType.NotFound:
            where.fs.delete_dir(where.path)
    except UnsafeDeleteError as exc:
        why = str(exc)
    except OSError as exc:
        outcome.errors.append(f"{shown}: {exc}")
        return
    if why is not None:
        _keep(outcome, shown, why)
    else:
        outcome.deleted.append(shown)


def purge_partitions(
    catalog: Catalog, partitions: Sequence[PartitionInfo], progress: Progress = _no_progress
) -> Purge:
    """Delete the directories of dropped (already unregistered) partitions, except where
    that is not safe (:func:`reason_to_keep`, asked for each right before its delete):
    those are ``kept``, with why; what could not be deleted is in ``errors``."""
    outcome = Purge()
    warehouse = Warehouse.of(catalog.settings)
    for done, partition in enumerate(partitions, start=1):
        if key_text(partition.location):
            _purge_one(catalog, partition, warehouse, outcome)
        else:
            _keep(outcome, partition.location, _UNKEYED)
        progress(done, len(partitions), partition.spec.to_path())
    return outcome


_ANOTHER_HOST = "names another host (stored by an older version); no purge deletes it"
# a relative or "~" path an older version stored: no overlap check sees what it names
_UNKEYED = (
    "names no directory the catalog can key (a relative path stored by an older "
    "version); no purge deletes it"
)


def _purge_one(
    catalog: Catalog, partition: PartitionInfo, warehouse: Warehouse, outcome: Purge
) -> None:
    try:
        where = _partition_directory(partition.location)
    except (OSError, ValueError) as exc:
        if names_another_host(partition.location):
            _keep(outcome, partition.location, _ANOTHER_HOST)
        else:
            outcome.errors.append(f"{partition.location}: {exc}")
    else:
        _delete_directory(
            catalog, where, partition.location, warehouse, outcome, str(partition.table)
        )


def _keep(outcome: Purge, shown: str, why: str) -> None:
    outcome.kept.append(f"{shown}: {why}")
    logger.warning("purge kept %s: %s", shown, why)


def _check_purge(info: TableInfo) -> None:
    if info.table_type == "EXTERNAL_TABLE":
        raise InvalidInputError(
            f"{info.name} is an EXTERNAL_TABLE: its files belong to another system, so "
            "--purge is refused (as Hive keeps an external table's data); nothing was dropped"
        )


def drop_partitions(
    catalog: Catalog,
    table: TableName | str,
    spec: PartitionSpec | Mapping[str, str | None],
    *,
    purge: bool = False,
    progress: Progress = _no_progress,
) -> tuple[DroppedPartitions, Purge]:
    """Unregister and announce every partition matching ``spec``; with ``purge`` then
    delete their directories.

    Raises:
        TableNotFoundError, InvalidInputError, ConcurrentWriteError: see
            :meth:`~hcat_notify.store.table_changes.drop_partitions`;
            ``purge`` on an external table.
    """
    if purge:
        _check_purge(catalog.get_table(table))
    dropped = catalog.partitions.drop(table, spec)
    return dropped, purge_partitions(catalog, dropped.partitions, progress) if purge else Purge()


def drop_table(
    catalog: Catalog,
    table: TableName | str,
    *,
    purge: bool = False,
    progress: Progress = _no_progress,
) -> tuple[DroppedTable, Purge]:
    """Unregister and announce a table (with its partitions and retained dones); with
    ``purge`` then delete its location and any partition directory outside it."""
    info = catalog.get_table(table)
    if purge:
        _check_purge(info)
    dropped = catalog.tables.drop(info.name, purged=purge)
    if not purge:
        return dropped, Purge()
    if names_another_host(info.location) or not key_text(info.location):
        outcome = purge_partitions(catalog, dropped.partitions, progress)
        hosted = names_another_host(info.location)
        _keep(outcome, info.location, _ANOTHER_HOST if hosted else _UNKEYED)
        return dropped, outcome
    root = TableLocation.parse(info.location)
    why = reason_to_keep(catalog, root.uri)
    inside = [
        partition
        for partition in dropped.partitions
        if _partition_directory(partition.location).path.startswith(root.path + "/")
    ]
    outside = [partition for partition in dropped.partitions if partition not in inside]
    # A root that must stay: its partitions are deleted one by one, each checked.
    outcome = purge_partitions(catalog, outside if why is None else [*outside, *inside], progress)
    if why is not None:
        _keep(outcome, info.location, why)
        return dropped, outcome
    _delete_directory(catalog, root, info.location, Warehouse.of(catalog.settings), outcome, None)
    return dropped, outcome
