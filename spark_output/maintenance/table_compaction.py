"""Compaction of registered partitions (``hcat-notify compact``): plan, compact a copy, switch.

Readers may be reading a registered partition, so it is never rewritten in place: its
files are linked (or copied) into ``<table>/_hcat_compacted/<spec>/<uuid>/``, compacted
there (a Spark task per partition, or a thread of this process), and the partition's
registered location is switched to the copy by compare-and-set on its row version. A
concurrent change makes that partition's switch back off; a failure in one partition
never stops the others. The old directory stays for readers that listed it, with a
superseded marker (:mod:`spark_output.maintenance.marker`) for
:mod:`spark_output.maintenance.purge`. The protocol and what readers see are described
in docs/compaction.md.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from hcat_notify import (
    Catalog,
    ConflictError,
    PartitionInfo,
    PartitionSpec,
    TableInfo,
    TableName,
)
from hcat_notify.files import partition_bases
from spark_output import spark_catalog
from spark_output.compaction.har.locations import har_location
from spark_output.compaction.har.partition import archive_partition
from spark_output.compaction.merge import merge_partition, plan_groups
from spark_output.compaction.policy import CompactionPolicy
from spark_output.compaction.result import PartitionCompaction
from spark_output.errors import CompactionError
from spark_output.fs import (
    FileStat,
    TableLocation,
    delete_dir_quietly,
    link_or_copy,
    list_data_files,
    split_location,
)
from spark_output.maintenance.marker import write_marker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "COMPACTED_DIR",
    "CompactionSummary",
    "PartitionPlan",
    "PartitionResult",
    "ProgressCallback",
    "compact_table",
    "switch_location",
]

logger = logging.getLogger(__name__)

COMPACTED_DIR = "_hcat_compacted"
"""Directory under the table root that holds compacted copies of partitions."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, item)``: :func:`compact_table` calls it after each planned
partition ends (``item`` is its spec), :func:`purge_superseded` after each deletable
directory (``item`` is its location)."""

PartitionStatus = Literal["compacted", "planned", "skipped", "failed", "conflict"]

_TASKS_PER_CORE = 4
"""With Spark, partitions are compacted in jobs of ``4 * defaultParallelism`` tasks, so
that progress is reported (and switches happen) while later partitions are still running."""


@dataclass(frozen=True)
class PartitionPlan:
    """One partition to compact, as planned on the driver (picklable, shipped to tasks).

    ``location`` is the registered location (URI) read at plan time with ``version``;
    ``target_uri`` the new directory the compacted copy goes to; ``bases`` the trusted
    local directories both are reached from without following a link
    (:func:`hcat_notify.files.partition_bases`).
    """

    table: str
    spec: str
    version: int
    location: str
    target_uri: str
    storage_format: str
    policy: CompactionPolicy
    files: tuple[FileStat, ...]
    bases: tuple[str, ...] = ()

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
    groups = plan_groups(small, plan.policy.target_file_bytes)
    return len(plan.files) - len(small) + len(groups), plan.bytes


def _plan_partition(
    table: TableInfo,
    root: TableLocation,
    partition: PartitionInfo,
    policy: CompactionPolicy,
    bases: tuple[str, ...],
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
    try:
        location = TableLocation.parse(partition.location)
        files = list_data_files(location.fs, location.path, bases=bases)
    except (CompactionError, OSError, ValueError) as exc:  # ValueError: an unusable location
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
        bases=bases,
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


def _base_uri(uri: str) -> str | None:
    """``scheme://authority`` for filesystems whose address pyarrow does not expose."""
    scheme, authority, _ = split_location(uri)
    if scheme in ("hdfs", "viewfs"):
        return f"{scheme}://{authority}"
    return None


def _compact_one(plan: PartitionPlan) -> _TaskResult:
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
            # by name from the partition's directory, reached again from the bases: a
            # directory swapped for a link since the listing is refused, not read
            link_or_copy(
                source.fs,
                posixpath.join(source.path, stat.name),
                posixpath.join(target.path, stat.name),
                bases=plan.bases,
            )
        result: PartitionCompaction
        if plan.policy.mode == "har":
            result = archive_partition(
                fs,
                target.path,
                policy=plan.policy,
                storage_format=plan.storage_format,
                base_uri=_base_uri(plan.target_uri),
            )
            new_location = har_location(target.uri)
        else:
            result = merge_partition(
                fs,
                target.path,
                storage_format=plan.storage_format,
                policy=plan.policy,
            )
            new_location = target.uri
        return _TaskResult(plan, result, new_location, None)
    except Exception as exc:  # noqa: BLE001 - reported per partition, others go on
        if created:
            delete_dir_quietly(fs, target.path)
        message = str(exc).strip() or type(exc).__name__
        return _TaskResult(
            plan,
            None,
            None,
            f"partition {plan.spec} of {plan.table}: {type(exc).__name__}: {message} "
            f"(registered location {plan.location} unchanged)",
        )


# --------------------------------------------------------------------------- switching


def switch_location(
    catalog: Catalog,
    plan: PartitionPlan,
    *,
    location: str,
    file_count: int,
    total_bytes: int,
    archived: bool,
) -> None:
    """Switch the partition's registered location to its compacted copy, by
    compare-and-set on the row version read at plan time.

    Raises:
        hcat_notify.ConflictError: the partition changed since it was planned.
    """
    catalog.partitions.update(
        plan.table,
        PartitionSpec.parse(plan.spec),
        expected_version=plan.version,
        location=location,
        file_count=file_count,
        total_bytes=total_bytes,
        archived=archived,
    )


def _switch(
    catalog: Catalog,
    task: _TaskResult,
    *,
    spark: SparkSession | None,
    spark_table: bool,
    spark_errors: list[str],
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
        switch_location(
            catalog,
            plan,
            location=task.new_location,
            file_count=file_count,
            total_bytes=total_bytes,
            archived=archived,
        )
    except ConflictError as exc:
        delete_dir_quietly(target.fs, target.path)
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
        delete_dir_quietly(target.fs, target.path)
        return _replace(
            base,
            error=f"partition {plan.spec} of {plan.table}: registry switch failed: {exc}; "
            "the compacted copy was removed",
        )
    write_marker(
        plan.location,
        table=plan.table,
        spec=plan.spec,
        new_location=task.new_location,
        files=plan.files,
        bases=plan.bases,
    )
    if spark is not None and spark_table:
        spark_errors += spark_catalog.set_location(
            spark, TableName.parse(plan.table), PartitionSpec.parse(plan.spec), task.new_location
        )
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


def _run_spark(spark: SparkSession, plans: Sequence[PartitionPlan]) -> list[_TaskResult]:
    try:
        results: list[_TaskResult] = (
            spark.sparkContext.parallelize(list(plans), len(plans)).map(_compact_one).collect()
        )
    except Exception as exc:  # noqa: BLE001 - the job failed as a whole (a worker died)
        first = _spark_error_line(exc)
        results = []
        for plan in plans:
            target = TableLocation.parse(plan.target_uri)
            delete_dir_quietly(target.fs, target.path)
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
) -> CompactionSummary:
    """Compact the small files of a table's registered partitions, swapping each atomically.

    Each planned partition is compacted as a copy, then its registered location is
    switched by compare-and-set; readers see the old files or the new ones, never a mix
    (docs/compaction.md).

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
    bases = partition_bases(catalog.settings.warehouse, info.location)

    plans: list[PartitionPlan] = []
    results: dict[str, PartitionResult] = {}
    for partition in partitions:
        planned = _plan_partition(info, root, partition, policy, bases)
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
        spark_table = spark_catalog.has_table(spark, info.name)
        done = 0

        def finish(task: _TaskResult) -> None:
            nonlocal done
            results[task.plan.spec] = _switch(
                catalog,
                task,
                spark=spark,
                spark_table=spark_table,
                spark_errors=spark_errors,
            )
            done += 1
            if progress is not None:
                progress(done, len(plans), task.plan.spec)

        if spark is not None:
            batch = max(1, _TASKS_PER_CORE * int(spark.sparkContext.defaultParallelism))
            for first in range(0, len(plans), batch):
                for task in _run_spark(spark, plans[first : first + batch]):
                    finish(task)
        else:
            threads = workers if workers is not None else min(8, os.cpu_count() or 1)
            if threads < 1:
                raise CompactionError(f"workers must be at least 1, got {threads}")
            if threads == 1 or len(plans) == 1:
                for plan in plans:
                    finish(_compact_one(plan))
            else:
                # pyarrow's I/O, codecs and kernels and hashlib release the GIL: threads
                # give this process's cores to the work; switches stay on this thread.
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    futures = [pool.submit(_compact_one, plan) for plan in plans]
                    for future in as_completed(futures):
                        finish(future.result())
        if spark is not None and spark_table:
            spark_errors += spark_catalog.refresh_table(spark, info.name)

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
