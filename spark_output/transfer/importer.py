"""``import_table``: an export into this catalog, all or nothing, recoverable.

Every checksum is verified before anything is written. The files are then copied into
the target table's staging directory and published by the same job-level committer as
a Spark write (:class:`~spark_output.commit.committer.PartitionCommitter`): its journal
entry records the plan, and, for a new table, the table's definition, so that the one
transaction that completes it registers the table (CREATE_TABLE), the partitions
(ADD_PARTITION, or INSERT with ``replace: true`` for replaced ones) and the done. A
crash in between is rolled forward or back by ``hcat-notify recover``, like a write.
The job id derives from the export's id and the target table: importing the same
export again finds its committed entry and does nothing.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyarrow import fs as pafs

from hcat_notify import (
    TOPIC_NAME_PROPERTY,
    Catalog,
    ConcurrentWriteError,
    InvalidInputError,
    JournalState,
    PartitionExistsError,
    PartitionSpec,
    TableInfo,
    TableLocation,
    TableName,
    TableNotFoundError,
    table_definition,
)
from hcat_notify.files import open_data_file
from hcat_notify.warehouse import canonical_location, location_key
from spark_output.commit.committer import PartitionCommitter, StagedPartition, staging_entry_id
from spark_output.commit.recovery import recover, writing
from spark_output.compaction.har.reader import list_har
from spark_output.errors import HarError
from spark_output.transfer.destination import open_destination
from spark_output.transfer.manifest import (
    ExportedPartition,
    Manifest,
    check_inside,
    copy_stream,
    file_checksum,
)

__all__ = ["ChecksumMismatchError", "ImportSummary", "import_table"]

Progress = Callable[[int, int, str], None]
_MAX_ATTEMPTS = 1000
EXTERNAL_TABLE = "EXTERNAL_TABLE"
MANAGED_TABLE = "MANAGED_TABLE"


class ChecksumMismatchError(InvalidInputError):
    """A file of an export does not hold what its manifest says (size or SHA-256)."""


@dataclass(frozen=True)
class ImportSummary:
    """What :func:`import_table` did."""

    table: str
    source: str
    export_id: str
    job_id: str
    table_created: bool
    partitions_created: tuple[str, ...]
    partitions_replaced: tuple[str, ...]
    files: int
    bytes: int
    event_ids: tuple[int, ...]
    insert_event_ids: tuple[int, ...]
    table_event_ids: tuple[int, ...]
    done_event_id: int | None
    already_imported: bool = False


def _no_progress(done: int, total: int, item: str) -> None:
    """Default progress callback: nothing shown."""


def _keep(filesystem: pafs.FileSystem, staged: StagedPartition) -> StagedPartition:
    """A compaction hook that changes nothing: the committer then notices archives."""
    return staged


def _check_archives(root: TableLocation, partition: ExportedPartition, source: str) -> None:
    """Read each archive's index of an archived partition, as a reader would: a part
    outside the archive, an entry beyond its part, or a malformed line refuses it."""
    indexes = [item.path for item in partition.files if posixpath.basename(item.path) == "_index"]
    if not indexes:
        raise InvalidInputError(
            f"{source}/{partition.data_dir} is listed as archived but holds no archive "
            "index (_index); nothing imported"
        )
    for index in indexes:
        archive = posixpath.join(partition.data_dir, posixpath.dirname(index))
        try:
            list_har(root.fs, root.join(archive))
        except HarError as exc:
            raise InvalidInputError(
                f"{source}/{archive} is not a sound archive: {exc}; nothing imported"
            ) from exc


def _verify(root: TableLocation, manifest: Manifest, source: str, progress: Progress) -> None:
    total = sum(len(partition.files) for partition in manifest.partitions)
    done = 0
    for partition in manifest.partitions:
        for item in partition.files:
            path = root.join(partition.data_dir, item.path)
            name = f"{source}/{partition.data_dir}/{item.path}"
            check_inside(root.fs, root.path, f"{partition.data_dir}/{item.path}", source)
            if root.fs.get_file_info(path).type != pafs.FileType.File:
                raise ChecksumMismatchError(f"{name} is missing from the export; nothing imported")
            size, digest = file_checksum(root.fs, path)
            if (size, digest) != (item.size, item.sha256):
                raise ChecksumMismatchError(
                    f"{name} does not match the manifest (size {size}, sha256 {digest}; "
                    f"expected {item.size}, {item.sha256}); nothing imported"
                )
            done += 1
            progress(done, total, f"verifying {partition.spec}/{item.path}")
        if partition.archived:
            _check_archives(root, partition, source)


def _new_table(
    name: TableName, manifest: Manifest, location: str | None, external: bool
) -> tuple[TableInfo, dict[str, Any]]:
    """A record of the table an import registers, and its definition for the journal.

    The manifest is not trusted with where files land: the table is managed (its
    location then checked against the warehouse roots like any other) unless the
    operator asks for an external one, at a location the operator names."""
    source = manifest.definition
    if external and location is None:
        raise InvalidInputError(
            f"--external needs --location: an external table {name} is registered where you "
            "choose, never where an export's manifest says; nothing imported"
        )
    if location is None and source["tableType"] == EXTERNAL_TABLE:
        raise InvalidInputError(
            f"the export's table was external, at {source['location']}: an import makes a "
            "managed table inside the warehouse roots; give --location (inside them), or "
            "--external --location URI for an external table; nothing imported"
        )
    table_type = EXTERNAL_TABLE if external else MANAGED_TABLE
    # The source's topic override named its own topic: the new table gets one of its own.
    properties = {k: v for k, v in source["properties"].items() if k != TOPIC_NAME_PROPERTY}
    where = canonical_location(
        location if location is not None else source["location"],
        what=f"location of table {name}",
        relative=location is not None,
        strip=True,
    )
    definition = table_definition(
        location=where,
        partition_keys=manifest.partition_keys,
        storage_format=source["storageFormat"],
        table_type=table_type,
        properties=properties,
    )
    definition["retention_seconds"] = source["retentionSeconds"]
    now = datetime.now(UTC)
    info = TableInfo(
        name=name,
        location=TableLocation.parse(where).uri,
        storage_format=source["storageFormat"],
        partition_keys=manifest.partition_keys,
        table_type=table_type,
        properties=properties,
        retention=timedelta(seconds=source["retentionSeconds"]),
        topic="",
        created_at=now,
        updated_at=now,
        version=0,
    )
    return info, definition


def _check_existing(
    catalog: Catalog,
    info: TableInfo,
    manifest: Manifest,
    location: str | None,
    *,
    replace: bool,
    external: bool,
) -> None:
    if info.partition_keys != manifest.partition_keys:
        raise InvalidInputError(
            f"the export's partition keys ({', '.join(manifest.partition_keys)}) are not "
            f"those of {info.name} ({', '.join(info.partition_keys)}); nothing imported"
        )
    if info.storage_format != manifest.definition["storageFormat"]:
        raise InvalidInputError(
            f"the export holds {manifest.definition['storageFormat']} files, {info.name} is "
            f"{info.storage_format}; nothing imported"
        )
    if external:
        raise InvalidInputError(
            f"--external applies to a new table; {info.name} exists ({info.table_type})"
        )
    same = location is None or location_key(
        canonical_location(location, what="--location", relative=True, strip=True)
    ) == location_key(info.location)
    if not same:
        raise InvalidInputError(
            f"--location applies to a new table; {info.name} lives at {info.location}"
        )
    registered = catalog.partitions.at(info.name, [p.spec for p in manifest.partitions])
    if registered and not replace:
        first = sorted(registered)[0]
        raise PartitionExistsError(
            f"partition {first} of {info.name} is registered ({len(registered)} of the "
            "export's are); --replace overwrites them (announced as INSERT with replace: "
            "true); nothing imported"
        )


def _check_free(catalog: Catalog, info: TableInfo, manifest: Manifest, new_table: bool) -> None:
    """Refuse to put a partition where unregistered files are: they would be mixed in."""
    registered = (
        {} if new_table else catalog.partitions.at(info.name, [p.spec for p in manifest.partitions])
    )
    root = TableLocation.parse(info.location)
    for partition in manifest.partitions:
        path = partition.spec.to_path()
        if path not in registered and root.fs.get_file_info(root.join(path)).type != (
            pafs.FileType.NotFound
        ):
            raise InvalidInputError(
                f"{root.uri_of(root.join(path))} exists but is not a registered partition of "
                f"{info.name}: its files would be mixed with the import's (choose another "
                "--location, or register it with 'hcat-notify partitions discover'); nothing "
                "imported"
            )


def _job_id(catalog: Catalog, manifest: Manifest, name: TableName) -> tuple[str, bool]:
    """The import's job id, and whether that import committed already."""
    base = "import-" + hashlib.sha256(f"{manifest.export_id}|{name}".encode()).hexdigest()[:24]
    for attempt in range(1, _MAX_ATTEMPTS):
        job = base if attempt == 1 else f"{base}-{attempt}"
        entry = catalog.commits.get(job)
        staging = catalog.commits.get(staging_entry_id(job))
        if entry is None and staging is None:
            return job, False
        if entry is not None and entry.state is JournalState.COMMITTED:
            return job, True
        if any(e is not None and e.state is JournalState.PENDING for e in (entry, staging)):
            raise ConcurrentWriteError(
                f"an import of this export into {name} is in progress (job {job}); if its "
                "process is gone, run 'hcat-notify recover'"
            )
    raise InvalidInputError(f"this export was imported into {name} and undone too often")


def _stage(
    root: TableLocation,
    partitions: tuple[ExportedPartition, ...],
    committer: PartitionCommitter,
    source: str,
    progress: Progress,
) -> None:
    """Copy the export's files into the job's staging directory, which must be new (or
    empty): on the local filesystem every directory and file is created by this copy,
    never through a link, from the warehouse root or the table's location as written
    (:func:`~spark_output.transfer.destination.open_destination`)."""
    total = sum(len(partition.files) for partition in partitions)
    done = 0
    staging = TableLocation(committer.fs, committer.staging, committer.staging_uri)
    unfinished = "nothing imported (the staging is removed)"
    with open_destination(
        staging,
        staging.uri,
        action="stage the import in",
        unfinished=unfinished,
        bases=committer.paths.bases,
    ) as target:
        for partition in partitions:
            target.make_dirs(partition.spec.to_path())
            for item in partition.files:
                # Again: an entry may have been swapped for a link since it was verified.
                check_inside(root.fs, root.path, f"{partition.data_dir}/{item.path}", source)
                relative = posixpath.join(partition.spec.to_path(), item.path)
                with (
                    open_data_file(root.fs, root.join(partition.data_dir, item.path)) as reader,
                    target.new_file(relative) as writer,
                ):
                    size, digest = copy_stream(reader, writer)
                if (size, digest) != (item.size, item.sha256):  # changed since verified
                    raise ChecksumMismatchError(
                        f"{source}/{partition.data_dir}/{item.path} changed while it was "
                        "copied; nothing imported"
                    )
                done += 1
                progress(done, total, f"copying {partition.spec}/{item.path}")


def import_table(
    catalog: Catalog,
    source: str,
    *,
    target: str | None = None,
    location: str | None = None,
    mark_done: PartitionSpec | Mapping[str, str | None] | None = None,
    replace: bool = False,
    external: bool = False,
    progress: Progress = _no_progress,
) -> ImportSummary:
    """Import the export at ``source`` into ``target`` (default: the exported table's name).

    A new table is managed, at ``location`` or else the manifest's location (inside the
    warehouse roots, as any managed table), unless ``external``: then an external table
    at ``location``, which must be given. The manifest's table type is not followed.

    Raises:
        ManifestError: no manifest, or a corrupt one.
        ChecksumMismatchError: a data file is missing or differs (the error names it).
        OutsideExportError: an entry is a symbolic link or resolves outside the export.
        hcat_notify.InvalidInputError: the table has other partition keys or format, a
            bad done spec, ``location`` or ``external`` given for an existing table,
            ``external`` without ``location``, an exported external table without
            ``location``, a malformed location, or an archive whose index is unsound
            (a part outside the archive, an entry beyond its part, a malformed line).
        hcat_notify.PartitionExistsError: a partition is registered and not ``replace``.
        (Nothing is registered or announced when any of these is raised.)
    """
    try:
        root = TableLocation.parse(source)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read an export at {source!r}: {exc}") from exc
    manifest = Manifest.read(root.fs, root.path, source)
    name = TableName.parse(target) if target is not None else manifest.table
    definition: dict[str, Any] | None = None
    try:
        info = catalog.get_table(name)
    except TableNotFoundError:
        info, definition = _new_table(name, manifest, location, external)
    done_spec = info.done_spec(mark_done) if mark_done is not None else None
    recover(catalog, str(name))  # what a crashed import or write of the table left
    job, already = _job_id(catalog, manifest, name)
    files = sum(len(p.files) for p in manifest.partitions)
    size = sum(f.size for p in manifest.partitions for f in p.files)
    if definition is None and not already:
        _check_existing(catalog, info, manifest, location, replace=replace, external=external)
    if not already:
        _check_free(catalog, info, manifest, definition is not None)
    if already:
        return ImportSummary(
            table=str(name),
            source=source,
            export_id=manifest.export_id,
            job_id=job,
            table_created=False,
            partitions_created=(),
            partitions_replaced=(),
            files=files,
            bytes=size,
            event_ids=(),
            insert_event_ids=(),
            table_event_ids=(),
            done_event_id=None,
            already_imported=True,
        )
    _verify(root, manifest, source, progress)
    committer = PartitionCommitter(
        catalog,
        info,
        job_id=job,
        mode="overwrite" if replace else "append",
        create_table=definition,
    )
    started_at = catalog.now()
    archives = any(partition.archived for partition in manifest.partitions)
    committer.check_staging_free()  # whatever is there is not this import's
    with writing(staging_entry_id(job)):
        # Journalled before the first copy: 'recover' removes what a crash leaves staged.
        committer.journal_staging(started_at=started_at)
        try:
            _stage(root, manifest.partitions, committer, source, progress)
        except BaseException:
            committer.cleanup()
            committer.end_staging("the copy failed; staging removed")
            raise
        try:
            # From here the committer's protocol: journal, moves, one transaction, or undo.
            record, _ = committer.commit(
                started_at=started_at,
                max_partitions=max(1, len(manifest.partitions)),
                mark_set_done=done_spec.as_dict() if done_spec is not None else None,
                compact=_keep if archives else None,
                phases={},
            )
        except Exception:
            committer.cleanup_unless_pending()  # one refused before its entry left it
            committer.end_staging("the commit failed; its moves were undone")
            raise
        committer.end_staging(f"published by job {job}")
    return ImportSummary(
        table=str(name),
        source=source,
        export_id=manifest.export_id,
        job_id=job,
        table_created=definition is not None,
        partitions_created=record.created,
        partitions_replaced=record.replaced,
        files=files,
        bytes=size,
        event_ids=record.event_ids,
        insert_event_ids=record.insert_event_ids,
        table_event_ids=record.table_event_ids,
        done_event_id=record.done_event_id,
    )
