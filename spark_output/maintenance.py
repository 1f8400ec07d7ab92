"""Compaction as maintenance of existing, registered partitions (``hcat-notify compact``).

:func:`compact_table` merges (Parquet/ORC) or archives (HAR, any format) the small files
of partitions that are already published and registered, while readers may be reading
them. It never rewrites a partition in place:

1. **Plan** (driver). The registered partitions matching a partial spec are listed from
   the catalog (with their row ``version``); archived ones are skipped; the data files of
   each are listed through :mod:`pyarrow.fs`; those where ``policy.triggers(files)`` are
   planned. ``dry_run`` stops here and reports the plan.
2. **Compact a copy** (a Spark task per partition when ``spark`` is given, else in this
   process; the same top-level function either way). The partition's data files are put
   into a new directory ``<table>/_hcat_compacted/<spec path>/<uuid>/`` — hard links on a
   local filesystem (no bytes copied; the files are immutable), copies elsewhere — and
   compacted there with :func:`spark_output.compaction.merge_partition` or
   :func:`spark_output.har.archive_partition`, which verify rows / bytes before anything
   counts. The directory is hidden from path-based readers of the table (a path
   component starts with ``_``, which Spark, Hive and HCatalog skip).
3. **Switch** (driver). The partition's registered location is switched to the new
   directory (or its ``har://`` URI) with a compare-and-set on the version read at plan
   time (:meth:`hcat_notify.store.Catalog.update_partition`). If another compaction or a
   write changed the partition meanwhile, the switch is refused
   (:class:`hcat_notify.errors.ConflictError`), the copy is deleted and the summary
   reports the conflict. If the Spark session's catalog has the table, its partition is
   re-pointed too (``ALTER TABLE ... PARTITION (...) SET LOCATION``, then
   ``refreshTable``).

Readers therefore see the old partition or the new one, never a mix: registry/catalog
readers switch from one complete directory to another in one row update, and readers
that scan the table directory by path (``spark.read.parquet(table_root)``) keep seeing
the old files, which stay where they were (consistent, just not compacted).

**Old files are kept, then purged.** A reader that listed the old location before the
switch must be able to finish, so the old directory is left in place. Its location is
reported in :attr:`CompactionSummary.old_locations` and recorded in a hidden marker file
``_hcat_superseded.json`` in it (which names the new location, the switch time and the
files copied). :func:`purge_superseded` (``hcat-notify compact --purge``) deletes such
directories later: only those with a marker older than ``older_than`` (default one hour,
:data:`DEFAULT_PURGE_AGE`), that no partition is registered at, whose new location is
registered or exists, and that hold no files the compaction did not copy. After a purge,
readers that scan the table directory by path no longer see the purged partitions.

Per-partition failures (integrity mismatch, unreadable file, conflict) do not stop the
other partitions: each is reported in the summary, naming the partition, with its
registry row and original files unchanged and its copy removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from hcat_notify import (
    Catalog,
    ConflictError,
    InvalidInputError,
    PartitionInfo,
    PartitionSpec,
    TableInfo,
    TableName,
)
from spark_output.compaction import (
    CompactionError,
    CompactionPolicy,
    FileStat,
    PartitionCompaction,
    data_files,
    merge_partition,
)
from spark_output.fs import TableLocation, is_hidden
from spark_output.har import archive_partition, har_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "COMPACTED_DIR",
    "DEFAULT_PURGE_AGE",
    "SUPERSEDED_MARKER",
    "CompactionSummary",
    "PartitionPlan",
    "PartitionResult",
    "ProgressCallback",
    "PurgeResult",
    "PurgeSummary",
    "compact_table",
    "purge_superseded",
]

logger = logging.getLogger(__name__)

COMPACTED_DIR = "_hcat_compacted"
"""Directory under the table root that holds compacted copies of partitions."""

SUPERSEDED_MARKER = "_hcat_superseded.json"
"""Marker written into a partition's old directory once its location has moved."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, item)``: :func:`compact_table` calls it after each planned
partition ends (``item`` is its spec), :func:`purge_superseded` after each deletable
directory (``item`` is its location)."""

CorruptHook = Callable[[pafs.FileSystem, str], None]
PartitionStatus = Literal["compacted", "planned", "skipped", "failed", "conflict"]

_TASKS_PER_CORE = 4
"""With Spark, partitions are compacted in jobs of ``4 * defaultParallelism`` tasks, so
that progress is reported (and switches happen) while later partitions are still running."""


@dataclass(frozen=True)
class PartitionPlan:
    """One partition to compact, as planned on the driver (picklable, shipped to tasks).

    ``location`` is the registered location (URI) read at plan time with ``version``;
    ``target_uri`` the new directory the compacted copy goes to.
    """

    table: str
    spec: str
    version: int
    location: str
    target_uri: str
    storage_format: str
    policy: CompactionPolicy
    files: tuple[FileStat, ...]

    @property
    def bytes(self) -> int:
        """Bytes of the partition's data files at plan time."""
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class PartitionResult:
    """What happened to one partition.

    ``status``: ``compacted`` (location switched), ``planned`` (dry run: would be
    compacted), ``skipped`` (archived, or the policy does not trigger; ``reason`` says
    which), ``failed`` (``error`` names the partition; registry row and files unchanged),
    ``conflict`` (the partition changed concurrently; the switch was refused).
    ``files_after``/``bytes_after`` are those of the new location (for a dry run, an
    estimate: the merge's file grouping, the same bytes). ``rows`` is the verified row
    count when known.
    """

    spec: str
    status: PartitionStatus
    old_location: str
    new_location: str | None = None
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows: int | None = None
    seconds: float = 0.0
    reason: str = ""
    error: str | None = None


@dataclass(frozen=True)
class CompactionSummary:
    """What :func:`compact_table` did (or, with ``dry_run``, would do).

    Counts: ``partitions_considered`` matched the spec; of those ``partitions_skipped``
    were left alone, ``partitions_compacted`` switched to a compacted location (for a dry
    run: planned), ``partitions_failed`` failed or were refused on a conflict.
    ``files_*``/``bytes_*`` add up the compacted (dry run: planned) partitions, before and
    after. ``old_locations`` are the superseded directories that were kept for readers
    (:func:`purge_superseded` deletes them later). ``errors`` has one line per failed
    partition, naming it; ``spark_catalog_errors`` the statements the Spark session's
    catalog refused (the registry switch stands).
    """

    table: str
    mode: str
    dry_run: bool
    partitions_considered: int
    partitions_compacted: int
    partitions_skipped: int
    partitions_failed: int
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    seconds: float
    results: tuple[PartitionResult, ...]
    errors: tuple[str, ...] = ()
    old_locations: tuple[str, ...] = ()
    spark_catalog_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no partition failed or conflicted."""
        return self.partitions_failed == 0


# --------------------------------------------------------------------------- planning


def _dry_run_estimate(plan: PartitionPlan) -> tuple[int, int]:
    """(files, bytes) after compaction, estimated without touching anything."""
    if plan.policy.mode == "har":
        return 1, plan.bytes  # one part file below 2 GiB per partition
    small = plan.policy.small_files(plan.files)
    groups = 0
    size = 0
    for stat in small:
        if groups and size + stat.size <= plan.policy.target_file_bytes:
            size += stat.size
        else:
            groups += 1
            size = stat.size
    return len(plan.files) - len(small) + groups, plan.bytes


def _plan_partition(
    table: TableInfo,
    root: TableLocation,
    partition: PartitionInfo,
    policy: CompactionPolicy,
) -> PartitionPlan | PartitionResult:
    spec = partition.spec.to_path()
    skip = PartitionResult(
        spec=spec,
        status="skipped",
        old_location=partition.location,
        files_before=partition.file_count,
        files_after=partition.file_count,
        bytes_before=partition.total_bytes,
        bytes_after=partition.total_bytes,
    )
    if partition.archived or partition.location.startswith("har:"):
        return _replace(skip, reason="archived (a Hadoop Archive is not compacted again)")
    location = TableLocation.parse(partition.location)
    try:
        files = data_files(location.fs, location.path)
    except (CompactionError, OSError) as exc:
        return _replace(
            skip,
            status="failed",
            error=f"partition {spec} of {table.name}: cannot list {partition.location}: {exc}",
        )
    skip = _replace(
        skip,
        files_before=len(files),
        files_after=len(files),
        bytes_before=sum(f.size for f in files),
        bytes_after=sum(f.size for f in files),
    )
    if not policy.triggers(files):
        small = len(policy.small_files(files))
        return _replace(
            skip,
            reason=f"{small} small file(s), the policy triggers at {policy.min_files}",
        )
    target = root.uri_of(root.join(COMPACTED_DIR, spec, uuid.uuid4().hex))
    return PartitionPlan(
        table=str(table.name),
        spec=spec,
        version=partition.version,
        location=partition.location,
        target_uri=target,
        storage_format=table.storage_format,
        policy=policy,
        files=tuple(files),
    )


def _replace(result: PartitionResult, **changes: Any) -> PartitionResult:
    return dataclasses.replace(result, **changes)


# --------------------------------------------------------------------------- the task


@dataclass(frozen=True)
class _TaskResult:
    """What :func:`_compact_one` sends back to the driver (picklable)."""

    plan: PartitionPlan
    compaction: PartitionCompaction | None
    new_location: str | None
    error: str | None


def _link_or_copy(fs: pafs.FileSystem, source: str, target: str) -> None:
    """Make ``target`` hold ``source``'s bytes: a hard link on a local filesystem (data
    files are immutable, so sharing the inode is safe and costs no I/O), else a copy."""
    if isinstance(fs, pafs.LocalFileSystem):
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # e.g. a filesystem without hard links: copy instead
    fs.copy_file(source, target)


def _base_uri(uri: str) -> str | None:
    """``scheme://authority`` for filesystems whose address pyarrow does not expose."""
    parts = urlsplit(uri)
    if parts.scheme in ("hdfs", "viewfs"):
        return f"{parts.scheme}://{parts.netloc}"
    return None


def _delete_dir_quietly(fs: pafs.FileSystem, directory: str) -> None:
    with contextlib.suppress(OSError):
        fs.delete_dir(directory)


def _compact_one(plan: PartitionPlan, corrupt_hook: CorruptHook | None = None) -> _TaskResult:
    """Compact one partition into ``plan.target_uri``; never raises (errors are returned).

    Runs in a Spark executor (or in-process): the filesystem is rebuilt from the URIs.
    On failure the new directory is removed; the partition's own files are never touched.
    """
    target = TableLocation.parse(plan.target_uri)
    fs = target.fs
    created = False
    try:
        source = TableLocation.parse(plan.location)
        fs.create_dir(target.path, recursive=True)
        created = True
        for stat in plan.files:
            _link_or_copy(source.fs, stat.path, posixpath.join(target.path, stat.name))
        result: PartitionCompaction
        if plan.policy.mode == "har":
            result = archive_partition(
                fs,
                target.path,
                policy=plan.policy,
                storage_format=plan.storage_format,
                base_uri=_base_uri(plan.target_uri),
                _corrupt_hook=corrupt_hook,
            )
            new_location = har_location(target.uri)
        else:
            result = merge_partition(
                fs,
                target.path,
                storage_format=plan.storage_format,
                policy=plan.policy,
                _corrupt_hook=corrupt_hook,
            )
            new_location = target.uri
        return _TaskResult(plan, result, new_location, None)
    except Exception as exc:  # noqa: BLE001 - reported per partition, others go on
        if created:
            _delete_dir_quietly(fs, target.path)
        message = str(exc).strip() or type(exc).__name__
        return _TaskResult(
            plan,
            None,
            None,
            f"partition {plan.spec} of {plan.table}: {type(exc).__name__}: {message} "
            f"(registered location {plan.location} unchanged)",
        )


# --------------------------------------------------------------------------- switching


def _sql_literal(value: str | None) -> str:
    text = "__HIVE_DEFAULT_PARTITION__" if value is None else value
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _spark_has_table(spark: SparkSession | None, name: TableName) -> bool:
    if spark is None:
        return False
    try:
        return bool(spark.catalog.tableExists(f"{name.db}.{name.table}"))
    except Exception:  # noqa: BLE001 - any Spark/py4j error: no usable catalog
        return False


def _write_marker(plan: PartitionPlan, new_location: str) -> None:
    """Leave ``_hcat_superseded.json`` in the old directory (best effort)."""
    old = TableLocation.parse(plan.location)
    document = {
        "format": "hcat-superseded",
        "version": 1,
        "table": plan.table,
        "partition": plan.spec,
        "superseded_by": new_location,
        "superseded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": [{"name": f.name, "size": f.size} for f in plan.files],
    }
    with (
        contextlib.suppress(OSError),
        old.fs.open_output_stream(
            posixpath.join(old.path, SUPERSEDED_MARKER), compression=None
        ) as out,
    ):
        out.write(json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n")


def _switch(
    catalog: Catalog,
    task: _TaskResult,
    *,
    spark: SparkSession | None,
    spark_table: bool,
    spark_errors: list[str],
    before_switch: Callable[[PartitionPlan], None] | None,
) -> PartitionResult:
    plan = task.plan
    base = PartitionResult(
        spec=plan.spec,
        status="failed",
        old_location=plan.location,
        files_before=len(plan.files),
        files_after=len(plan.files),
        bytes_before=plan.bytes,
        bytes_after=plan.bytes,
    )
    result = task.compaction
    if task.error is not None or result is None or task.new_location is None:
        return _replace(base, error=task.error or f"partition {plan.spec}: no result")
    target = TableLocation.parse(plan.target_uri)
    archived = plan.policy.mode == "har"
    # The registry counts the files a reader sees: for a HAR, the archived files.
    file_count = result.files_before if archived else result.files_after
    total_bytes = result.bytes_before if archived else result.bytes_after
    try:
        if before_switch is not None:
            before_switch(plan)
        catalog.update_partition(
            plan.table,
            PartitionSpec.parse(plan.spec),
            expected_version=plan.version,
            location=task.new_location,
            file_count=file_count,
            total_bytes=total_bytes,
            archived=archived,
        )
    except ConflictError as exc:
        _delete_dir_quietly(target.fs, target.path)
        return _replace(
            base,
            status="conflict",
            error=(
                f"partition {plan.spec} of {plan.table}: compaction refused, the partition "
                f"was changed concurrently (another compaction or a write): {exc}; "
                "the compacted copy was removed"
            ),
        )
    except Exception as exc:  # noqa: BLE001 - e.g. the database is down: keep the original
        _delete_dir_quietly(target.fs, target.path)
        return _replace(
            base,
            error=f"partition {plan.spec} of {plan.table}: registry switch failed: {exc}; "
            "the compacted copy was removed",
        )
    _write_marker(plan, task.new_location)
    if spark is not None and spark_table:
        name = TableName.parse(plan.table)
        spec = PartitionSpec.parse(plan.spec)
        clause = ", ".join(f"`{key}` = {_sql_literal(value)}" for key, value in spec.items)
        statement = (
            f"ALTER TABLE `{name.db}`.`{name.table}` PARTITION ({clause}) "
            f"SET LOCATION {_sql_literal(task.new_location)}"
        )
        try:
            spark.sql(statement)
        except Exception as exc:  # noqa: BLE001 - the registry switch stands; report it
            spark_errors.append(f"{statement}: {str(exc).strip().splitlines()[0][:500]}")
    return PartitionResult(
        spec=plan.spec,
        status="compacted",
        old_location=plan.location,
        new_location=task.new_location,
        files_before=result.files_before,
        files_after=file_count if archived else result.files_after,
        bytes_before=result.bytes_before,
        bytes_after=result.bytes_after,
        rows=result.rows,
        seconds=result.seconds,
    )


_PYTHON_ERROR = re.compile(r"^\s*([\w.]+(?:Error|Exception|Exit|Interrupt)\b.*)$")


def _spark_error_line(exc: BaseException) -> str:
    """The most telling line of a Spark job failure: the Python worker's own exception
    (e.g. ``ModuleNotFoundError: No module named 'spark_output'``) if it is there."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    python = [m.group(1) for line in lines if (m := _PYTHON_ERROR.match(line))]
    text = python[-1] if python else (lines[0] if lines else repr(exc))
    return text.strip()[:500]


def _run_spark(
    spark: SparkSession, plans: Sequence[PartitionPlan], hook: CorruptHook | None
) -> list[_TaskResult]:
    def run(plan: PartitionPlan) -> _TaskResult:
        return _compact_one(plan, hook)

    task = _compact_one if hook is None else run
    try:
        results: list[_TaskResult] = (
            spark.sparkContext.parallelize(list(plans), len(plans)).map(task).collect()
        )
    except Exception as exc:  # noqa: BLE001 - the job failed as a whole (a worker died)
        first = _spark_error_line(exc)
        results = []
        for plan in plans:
            target = TableLocation.parse(plan.target_uri)
            _delete_dir_quietly(target.fs, target.path)
            results.append(
                _TaskResult(
                    plan,
                    None,
                    None,
                    f"partition {plan.spec} of {plan.table}: the Spark job failed: {first} "
                    f"(registered location {plan.location} unchanged)",
                )
            )
    return results


# --------------------------------------------------------------------------- entry point


def compact_table(
    catalog: Catalog,
    table: str,
    spec: PartitionSpec | Mapping[str, str | None] | None = None,
    *,
    policy: CompactionPolicy,
    spark: SparkSession | None = None,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    _corrupt_hook: CorruptHook | None = None,
    _before_switch: Callable[[PartitionPlan], None] | None = None,
) -> CompactionSummary:
    """Compact the small files of a table's registered partitions, swapping each atomically.

    See the module documentation for the protocol (plan, compact a copy, compare-and-set
    switch) and what readers see.

    Args:
        catalog: the open catalog.
        table: ``db.table``.
        spec: a partial spec (``{"datestamp": "20110228"}``); None for every partition.
        policy: when a partition triggers, and ``mode`` ``merge`` (Parquet/ORC tables) or
            ``har`` (any format).
        spark: run each partition's compaction as a Spark task of this session (pyarrow
            in the executor); without it, partitions are compacted in this
            process (see ``workers``). The session's catalog is also updated if it has the
            table.
        dry_run: only plan: report which partitions would change and their files/bytes;
            nothing is written.
        progress: called as ``progress(done, total, spec)`` after each planned partition
            is switched, refused or failed.
        workers: without ``spark``, how many partitions are compacted at once, in
            threads of this process (default: the number of CPUs, at most 8). The
            compare-and-set switches always run on the calling thread.
        _corrupt_hook: tests only: passed to the merge/archive to damage the rewritten
            files before verification.
        _before_switch: tests only: called on the driver with the plan right before the
            compare-and-set switch.

    Returns:
        A :class:`CompactionSummary`. Per-partition failures are in it, not raised.

    Raises:
        hcat_notify.TableNotFoundError: no such table.
        hcat_notify.InvalidInputError: the spec names keys the table does not have.
        CompactionError: ``merge`` on a table that is neither Parquet nor ORC.
    """
    started = time.monotonic()
    info = catalog.get_table(table)
    if policy.mode == "merge" and info.storage_format not in ("parquet", "orc"):
        raise CompactionError(
            f"cannot merge {info.storage_format} table {info.name}: merge mode supports "
            "parquet and orc tables; use mode 'har'"
        )
    partitions = catalog.list_partitions(info.name, spec)
    root = TableLocation.parse(info.location)

    plans: list[PartitionPlan] = []
    results: dict[str, PartitionResult] = {}
    for partition in partitions:
        planned = _plan_partition(info, root, partition, policy)
        if isinstance(planned, PartitionPlan):
            plans.append(planned)
        else:
            results[planned.spec] = planned

    spark_errors: list[str] = []
    if dry_run:
        for plan in plans:
            files_after, bytes_after = _dry_run_estimate(plan)
            results[plan.spec] = PartitionResult(
                spec=plan.spec,
                status="planned",
                old_location=plan.location,
                files_before=len(plan.files),
                files_after=files_after,
                bytes_before=plan.bytes,
                bytes_after=bytes_after,
            )
    elif plans:
        spark_table = _spark_has_table(spark, info.name)
        done = 0

        def finish(task: _TaskResult) -> None:
            nonlocal done
            results[task.plan.spec] = _switch(
                catalog,
                task,
                spark=spark,
                spark_table=spark_table,
                spark_errors=spark_errors,
                before_switch=_before_switch,
            )
            done += 1
            if progress is not None:
                progress(done, len(plans), task.plan.spec)

        if spark is not None:
            batch = max(1, _TASKS_PER_CORE * int(spark.sparkContext.defaultParallelism))
            for first in range(0, len(plans), batch):
                for task in _run_spark(spark, plans[first : first + batch], _corrupt_hook):
                    finish(task)
        else:
            threads = workers if workers is not None else min(8, os.cpu_count() or 1)
            if threads < 1:
                raise CompactionError(f"workers must be at least 1, got {threads}")
            if threads == 1 or len(plans) == 1:
                for plan in plans:
                    finish(_compact_one(plan, _corrupt_hook))
            else:
                # pyarrow's I/O, codecs and kernels and hashlib release the GIL: threads
                # give this process's cores to the work; switches stay on this thread.
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    futures = [pool.submit(_compact_one, plan, _corrupt_hook) for plan in plans]
                    for future in as_completed(futures):
                        finish(future.result())
        if spark is not None and spark_table:
            try:
                spark.catalog.refreshTable(f"{info.name.db}.{info.name.table}")
            except Exception as exc:  # noqa: BLE001 - a stale cache only delays readers
                spark_errors.append(f"refreshTable {info.name}: {exc}")

    ordered = tuple(results[p.spec.to_path()] for p in partitions)
    changed = [r for r in ordered if r.status in ("compacted", "planned")]
    failed = [r for r in ordered if r.status in ("failed", "conflict")]
    return CompactionSummary(
        table=str(info.name),
        mode=policy.mode,
        dry_run=dry_run,
        partitions_considered=len(ordered),
        partitions_compacted=len(changed),
        partitions_skipped=sum(1 for r in ordered if r.status == "skipped"),
        partitions_failed=len(failed),
        files_before=sum(r.files_before for r in changed),
        files_after=sum(r.files_after for r in changed),
        bytes_before=sum(r.bytes_before for r in changed),
        bytes_after=sum(r.bytes_after for r in changed),
        seconds=time.monotonic() - started,
        results=ordered,
        errors=tuple(r.error for r in failed if r.error),
        old_locations=tuple(r.old_location for r in ordered if r.status == "compacted"),
        spark_catalog_errors=tuple(spark_errors),
    )


# --------------------------------------------------------------------------- purging

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


@dataclass(frozen=True)
class _Marker:
    """A parsed ``_hcat_superseded.json`` (see :func:`_write_marker`)."""

    table: str
    partition: str
    superseded_by: str
    superseded_at: datetime
    files: Mapping[str, int]


class _MarkerError(Exception):
    """A marker that cannot be trusted; the message says why (never leaves this module)."""


def _read_marker(fs: pafs.FileSystem, directory: str) -> _Marker | None:
    """The marker in ``directory``, or None if it has none.

    Raises:
        _MarkerError: the marker is unreadable or not one :func:`_write_marker` wrote.
    """
    path = posixpath.join(directory, SUPERSEDED_MARKER)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    try:
        with fs.open_input_stream(path, compression=None) as stream:
            document = json.loads(stream.read().decode("utf-8"))
        if document.get("format") != "hcat-superseded" or document.get("version") != 1:
            raise _MarkerError("not a version 1 hcat-superseded marker")
        when = datetime.fromisoformat(document["superseded_at"])
        files = {str(f["name"]): int(f["size"]) for f in document["files"]}
        marker = _Marker(
            table=str(document["table"]),
            partition=str(document["partition"]),
            superseded_by=str(document["superseded_by"]),
            superseded_at=when if when.tzinfo is not None else when.replace(tzinfo=UTC),
            files=files,
        )
    except _MarkerError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _MarkerError(f"unreadable {SUPERSEDED_MARKER}: {type(exc).__name__}: {exc}") from exc
    return marker


def _storage_uri(location: str) -> str:
    """Where a location's files are: for ``har://<scheme>-<authority>/…/x.har[/inner]`` the
    archive directory on the underlying filesystem, else the location itself."""
    parts = urlsplit(location)
    if parts.scheme != "har":
        return location
    scheme, _, authority = parts.netloc.partition("-")
    segments = parts.path.split("/")
    archive = next((i for i, s in enumerate(segments) if s.endswith(".har")), len(segments) - 1)
    path = "/".join(segments[: archive + 1])
    return f"file://{path}" if scheme == "file" else f"{scheme}://{authority}{path}"


def _path_key(location: str) -> str:
    """A location's path, for telling whether two locations may be the same directory.

    Scheme and authority are ignored and local paths are resolved, so that two spellings
    of one directory (``/t/p``, ``file:///t/p``, ``hdfs://nn/t/p`` vs ``hdfs://nn:8020/t/p``)
    compare equal: a false match only makes purge keep a directory, never delete one.
    """
    uri = _storage_uri(location)
    parts = urlsplit(uri)
    if len(parts.scheme) <= 1:  # a plain path (or a Windows drive letter)
        return os.path.realpath(os.path.expanduser(uri))
    path = parts.path
    if parts.scheme in ("s3", "s3a", "s3n", "gs", "gcs"):
        path = f"{parts.netloc}/{path.lstrip('/')}"  # pyarrow names these bucket/key
    path = posixpath.normpath("/" + path.lstrip("/"))
    return os.path.realpath(path) if parts.scheme == "file" else path


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
            where = TableLocation.parse(_storage_uri(location))
            kind = where.fs.get_file_info(where.path).type
            if kind == pafs.FileType.NotFound:
                return f"its new location {location} does not exist"
            if kind != pafs.FileType.Directory:
                return f"its new location {location} is not a directory"
            marker = _read_marker(where.fs, where.path)
        except _MarkerError as exc:
            return f"its new location {location} has a bad marker: {exc}"
        except (OSError, ValueError) as exc:
            return f"cannot check its new location {location}: {exc}"
        if marker is None:
            return None
        location = marker.superseded_by
    return f"more than {_MAX_CHAIN} superseded locations follow it"


def _directory_usage(fs: pafs.FileSystem, directory: str) -> tuple[list[pafs.FileInfo], int]:
    """Every entry under ``directory`` (recursively) and the bytes deleting it frees."""
    entries = list(fs.get_file_info(pafs.FileSelector(directory, recursive=True)))
    freed = 0
    for info in entries:
        if info.type != pafs.FileType.File:
            continue
        if isinstance(fs, pafs.LocalFileSystem):
            with contextlib.suppress(OSError):
                if os.stat(info.path).st_nlink > 1:
                    continue  # still linked from a compacted copy: no space comes back
        freed += int(info.size or 0)
    return entries, freed


def _uncovered(directory: str, entries: Sequence[pafs.FileInfo], marker: _Marker) -> str | None:
    """Why the directory holds data the compaction did not cover, or None."""
    extra = []
    for info in entries:
        if posixpath.dirname(info.path) != directory.rstrip("/") or is_hidden(info.base_name):
            continue
        if info.type == pafs.FileType.Directory:
            extra.append(f"{info.base_name}/")
        elif marker.files.get(info.base_name) != int(info.size or 0):
            extra.append(info.base_name)
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
    marker: _Marker | _MarkerError | None,
    *,
    registry: _Registry,
    now: datetime,
    older_than: timedelta,
) -> PurgeResult | None:
    """Decide one candidate directory: ``planned`` if it may go, else ``kept``/``refused``;
    None for a registered partition directory that was never superseded (nothing to say)."""
    uri = root.uri_of(directory)
    path = spec.to_path()
    kept = PurgeResult(location=uri, spec=path, status="kept")
    holders = registry.holders(_path_key(uri))
    if isinstance(marker, _MarkerError):
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
    entries, freed = _directory_usage(root.fs, directory)
    problem = _uncovered(directory, entries, marker)
    if problem is not None:
        return dataclasses.replace(kept, status="refused", reason=problem)
    files = [i for i in entries if i.type == pafs.FileType.File]
    return dataclasses.replace(
        kept,
        status="planned",
        files=len(files),
        bytes=sum(int(i.size or 0) for i in files),
        bytes_freed=freed,
        reason="",
    )


def _remove_empty_dir(fs: pafs.FileSystem, directory: str) -> None:
    """Remove ``directory`` only if it is empty (pyarrow's ``delete_dir`` is recursive)."""
    if isinstance(fs, pafs.LocalFileSystem):
        os.rmdir(directory)  # atomic: fails if anything appeared in it
        return
    left = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    if left:
        raise OSError(f"{directory} is not empty: {', '.join(i.base_name for i in left[:3])}")
    fs.delete_dir(directory)


def _delete_superseded(fs: pafs.FileSystem, directory: str, marker: _Marker) -> str | None:
    """Delete a superseded directory, checked once more; None when done, else why not.

    Only the files listed now (and found covered by ``marker``) are deleted, one by one,
    the marker last, then the emptied directories: a directory swapped in at this path
    meanwhile (an overwrite of the partition) is never deleted wholesale, and if this
    stops part-way, a later purge still recognises what is left as superseded.

    Raises:
        OSError: a deletion failed.
    """
    try:
        again = _read_marker(fs, directory)
    except _MarkerError as exc:
        return f"its marker changed while purging: {exc}"
    if again != marker:
        return "its marker changed or went away while purging"
    entries = list(fs.get_file_info(pafs.FileSelector(directory, recursive=True)))
    problem = _uncovered(directory, entries, marker)
    if problem is not None:
        return problem
    marker_path = posixpath.join(directory, SUPERSEDED_MARKER)
    for info in entries:
        if info.type == pafs.FileType.File and info.path != marker_path:
            with contextlib.suppress(FileNotFoundError):  # gone already: fine
                fs.delete_file(info.path)
    fs.delete_file(marker_path)
    subdirs = [i.path for i in entries if i.type == pafs.FileType.Directory]
    for path in sorted(subdirs, key=lambda p: p.count("/"), reverse=True):
        _remove_empty_dir(fs, path)
    _remove_empty_dir(fs, directory)
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

    Candidates are found by listing the table's directory through :mod:`pyarrow.fs`:
    every ``<table>/<spec path>`` and every ``<table>/_hcat_compacted/<spec path>/<copy>``
    (a compacted copy that was itself compacted again) of the partitions matching
    ``spec``; the partitions' files are not listed. A directory is deleted only if all
    of these hold:

    * it holds a ``_hcat_superseded.json`` marker, for this table and partition;
    * the marker was written at least ``older_than`` ago;
    * no partition of the table is registered at it, inside it or above it (the
      registry is read after the listing, and read again right before deleting);
    * its data is safe elsewhere: the marker's new location is the partition's
      registered location, or exists and is not superseded itself (a chain of markers is
      followed to its end); otherwise it is refused and reported;
    * its visible files are the ones the compaction copied (name and size), so nothing
      written into it after the switch is lost; otherwise it is refused and reported.

    Right before deleting, the marker and the files are checked once more; then exactly
    the files listed are deleted, one by one, the marker last, and the directory only
    once empty (so an overwrite that swaps a new directory in at the same path meanwhile
    never loses its files). Empty parent directories are left.
    After a purge, readers that scan the table directory by path no longer see the
    purged partitions' rows (their compacted copies are hidden under ``_hcat_compacted``);
    registry and catalog readers are not affected. Old locations outside the table's
    directory are not found.

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
    now = datetime.now(UTC)
    results: list[PurgeResult] = []
    deletable: dict[int, tuple[str, _Marker]] = {}
    for directory, partition in candidates:
        marker: _Marker | _MarkerError | None
        try:
            marker = _read_marker(root.fs, directory)
        except _MarkerError as exc:
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
        )
        if decided is None:
            continue
        if decided.status == "planned" and isinstance(marker, _Marker):
            deletable[len(results)] = (directory, marker)
        results.append(decided)
    if deletable and not dry_run:
        # A directory registered again since the first read must not go.
        registry = _Registry.of(catalog.list_partitions(info.name))
    for done, (number, (directory, marker)) in enumerate(deletable.items(), start=1):
        if not dry_run:
            if _before_delete is not None:
                _before_delete(results[number].location)
            results[number] = _purge_one(root.fs, directory, marker, results[number], registry)
        if progress is not None:
            progress(done, len(deletable), results[number].location)
    return _purge_summary(str(info.name), results, dry_run, older_than, started)


def _purge_one(
    fs: pafs.FileSystem,
    directory: str,
    marker: _Marker,
    planned: PurgeResult,
    registry: _Registry,
) -> PurgeResult:
    holders = registry.holders(_path_key(planned.location))
    if holders:
        return dataclasses.replace(
            planned,
            status="kept",
            reason=f"registered again (partition {holders[0]}) although it is superseded",
        )
    try:
        problem = _delete_superseded(fs, directory, marker)
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
