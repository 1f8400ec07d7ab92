"""``write_partitions``: the PySpark counterpart of HCatalog's output format and committer."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from pyarrow import fs as pafs

from hcat_notify import (
    DEFAULT_RETENTION,
    AnnounceMode,
    Catalog,
    CommitRecord,
    JournalState,
    PartitionSpec,
    Settings,
    TableInfo,
    TableName,
    load_settings,
    staging_entry_id,
    validate_job_id,
)
from spark_output import spark_catalog
from spark_output.commit.committer import CompactHook, PartitionCommitter, StagedPartition
from spark_output.commit.plan import CommitPlan
from spark_output.commit.recovery import recover, writing
from spark_output.compaction.policy import CompactionPolicy
from spark_output.compaction.staged import compact_staged
from spark_output.errors import (
    InvalidArgumentError,
    PartitionColumnsError,
    SparkCatalogError,
    WriteFailedError,
)
from spark_output.fs import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["CommitResult", "create_table", "write_partitions"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PARTITIONS = 1000  # Hive's hive.exec.max.dynamic.partitions


@dataclass(frozen=True)
class CommitResult:
    """What :func:`write_partitions` committed.

    Attributes:
        job_id: the write's id (re-running it is a no-op).
        table: ``db.table``.
        mode: append or overwrite.
        partitions_created: path specs of partitions that are new (announced).
        partitions_replaced: partitions an overwrite replaced (not announced again).
        partitions_appended: existing partitions an append added files to.
        files: data files published.
        bytes: bytes published.
        rows: rows written, when known (None otherwise).
        event_ids: the ADD_PARTITION events: one per new partition, or (``announce``
            ``write``) the few that list them all.
        insert_event_ids: the INSERT events of the replaced and appended partitions.
        done_event_id: the MARK_SET_DONE event: the one asked for, else the one the
            table's completeness rule wrote for a set the write completed (the last,
            when it completed several).
        set_done_event_ids: the MARK_SET_DONE events the table's completeness rule
            wrote for the sets the write completed.
        phase_seconds: elapsed time per phase (stage, discover, compact, journal, move,
            register, spark_catalog, cleanup).
        already_committed: True when the job id had committed before (nothing done now).
        spark_catalog_errors: statements the Spark session's catalog refused (the commit
            stands; its partitions are registered and announced all the same).
    """

    job_id: str
    table: str
    mode: str
    partitions_created: tuple[str, ...]
    partitions_replaced: tuple[str, ...]
    partitions_appended: tuple[str, ...]
    files: int
    bytes: int
    rows: int | None
    event_ids: tuple[int, ...]
    done_event_id: int | None
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    insert_event_ids: tuple[int, ...] = ()
    already_committed: bool = False
    spark_catalog_errors: tuple[str, ...] = ()
    set_done_event_ids: tuple[int, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        """Every partition this write touched."""
        return self.partitions_created + self.partitions_replaced + self.partitions_appended


def _result(
    record: CommitRecord,
    table: TableInfo,
    mode: str,
    plan: CommitPlan,
    phases: Mapping[str, float],
    *,
    already: bool = False,
) -> CommitResult:
    return CommitResult(
        job_id=record.job_id,
        table=str(table.name),
        mode=mode,
        partitions_created=record.created,
        partitions_replaced=record.replaced,
        partitions_appended=record.appended,
        files=sum(move.file_count for move in plan.partitions),
        bytes=sum(move.bytes for move in plan.partitions),
        rows=None,  # the committer counts files, not rows
        event_ids=record.event_ids,
        done_event_id=record.done_event_id,
        phase_seconds=dict(phases),
        insert_event_ids=record.insert_event_ids,
        set_done_event_ids=record.set_done_event_ids,
        already_committed=already,
    )


def _check_columns(df: DataFrame, table: TableInfo, partition_by: Sequence[str] | None) -> None:
    keys = list(table.partition_keys)
    if partition_by is not None:
        given = [column.lower() for column in partition_by]
        if given != keys:
            raise PartitionColumnsError(
                f"partition_by {list(partition_by)} does not match the partition keys of "
                f"{table.name}: {keys} (same keys, same order)"
            )
    columns = {column.lower(): column for column in df.columns}
    missing = [key for key in keys if key not in columns]
    if missing:
        raise PartitionColumnsError(
            f"the DataFrame has no column(s) {missing} for the partition keys of {table.name} "
            f"({keys}); its columns are {list(df.columns)}"
        )
    if len(columns) == len(keys):
        raise PartitionColumnsError(
            f"the DataFrame has only partition columns; {table.name} needs data columns too"
        )


def _sync_spark_catalog(
    spark: SparkSession, table: TableInfo, plan: CommitPlan, record: CommitRecord
) -> list[str]:
    """Add (or re-point) the committed partitions in the session's catalog, if it has the table."""
    if not spark_catalog.has_table(spark, table.name):
        return []
    location = TableLocation.parse(plan.table_uri)
    replaced = set(record.replaced)
    errors = spark_catalog.add_partitions(
        spark,
        table.name,
        [
            spark_catalog.PartitionLocation(
                spec=PartitionSpec.parse(move.spec),
                location=move.location or location.uri_of(move.final),
                replaced=move.spec in replaced,
            )
            for move in plan.partitions
        ],
    )
    if record.replaced:
        errors += spark_catalog.refresh_table(spark, table.name)
    return errors


def write_partitions(
    df: DataFrame,
    table: str,
    *,
    mode: Literal["append", "overwrite"] = "append",
    partition_by: Sequence[str] | None = None,
    mark_set_done: Mapping[str, str | None] | None = None,
    compaction: CompactionPolicy | CompactHook | None = None,
    max_partitions: int = DEFAULT_MAX_PARTITIONS,
    settings: Settings | None = None,
    job_id: str | None = None,
    announce: AnnounceMode | None = None,
) -> CommitResult:
    """Write ``df`` into the dynamic partitions of ``table``; announce what was committed.

    All or nothing: either every partition of this write is visible, registered and
    announced (ADD_PARTITION for new partitions, an INSERT for each existing one it
    appended to or replaced, then the MARK_SET_DONE if asked), or none is, and the table
    location is unchanged.

    Args:
        df: the data, with a column per partition key.
        table: ``db.table``, registered in the catalog.
        mode: ``append`` adds files (existing partitions keep theirs); ``overwrite``
            replaces exactly the partitions written, never others.
        partition_by: must equal the table's partition keys if given.
        mark_set_done: a partial spec (a prefix of the table's keys, as every done's) to
            announce after every partition is committed.
        compaction: a policy object (``spark_output.CompactionPolicy``) or a callable run
            on each staged partition before publication.
        max_partitions: refuse a write that produces more partitions than this.
        settings: deployment settings (default: :func:`load_settings`).
        job_id: a unique id for this write (default: generated); re-running a committed
            job id returns its result without writing again. One path component
            (:func:`hcat_notify.model.names.validate_job_id`).
        announce: ``partition`` (one ADD_PARTITION per new partition) or ``write`` (one
            per write listing them all, split so that no message exceeds the settings'
            ``max_message_bytes``); default: the table's ``hcat.notify.announce``.

    Returns:
        A :class:`CommitResult`.

    Raises:
        InvalidArgumentError: an unknown ``mode`` or ``announce``, or a ``max_partitions``
            below 1.
        hcat_notify.InvalidInputError: an invalid ``job_id`` (nothing is written).
        PartitionColumnsError: partition columns do not match the table (before any
            Spark job runs).
        TooManyPartitionsError: more than ``max_partitions`` partitions.
        WriteFailedError: the Spark job failed (the table is unchanged).
        hcat_notify.HcatNotifyError: unknown table, bad mark_set_done spec, or
            :class:`hcat_notify.ConcurrentWriteError` when another job overwrites the
            same partitions.
    """
    if mode not in ("append", "overwrite"):
        raise InvalidArgumentError(f"unknown mode {mode!r}; use 'append' or 'overwrite'")
    if isinstance(max_partitions, bool) or not isinstance(max_partitions, int):
        raise InvalidArgumentError(f"max_partitions must be an int, got {max_partitions!r}")
    if max_partitions < 1:
        raise InvalidArgumentError(f"max_partitions must be at least 1, got {max_partitions}")
    if announce not in (None, *AnnounceMode):
        raise InvalidArgumentError(f"unknown announce {announce!r}; use 'partition' or 'write'")
    announce = None if announce is None else AnnounceMode(announce)
    if job_id is not None:
        validate_job_id(job_id)  # it names the staging directory
    settings = settings or load_settings()
    phases: dict[str, float] = {}
    with Catalog.open(settings) as catalog:
        info = catalog.get_table(table)
        if mark_set_done is not None:
            info.done_spec(mark_set_done)  # validate before any work
        _check_columns(df, info, partition_by)
        job = job_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}"
        previous = catalog.commits.get(job)
        if (
            previous is not None
            and previous.state is JournalState.COMMITTED
            and previous.result is not None
        ):
            logger.info("job %s already committed: nothing to do", job)
            return _result(
                CommitRecord.from_dict(previous.result),
                info,
                previous.mode,
                CommitPlan.from_json(previous.plan),
                {},
                already=True,
            )
        # Finish what a crashed writer of this table left behind (only if it is gone).
        recover(catalog, str(info.name))
        started_at = catalog.now()
        committer = PartitionCommitter(catalog, info, job_id=job, mode=mode)
        committer.check_staging_free()  # else the cleanup below would delete its files
        with writing(staging_entry_id(job)):
            # Journalled before Spark writes: 'recover' removes what a crash leaves staged.
            committer.journal_staging(started_at=started_at)
            columns = {column.lower(): column for column in df.columns}
            clock = time.monotonic()
            try:
                (
                    df.write.format(info.storage_format)
                    .partitionBy(*[columns[key] for key in info.partition_keys])
                    .mode("errorifexists")
                    .save(committer.staging_uri)
                )
            except Exception as exc:
                committer.cleanup()
                committer.end_staging("the Spark job failed; staging removed")
                raise WriteFailedError(
                    f"the Spark job writing {info.name} failed; the table is unchanged: "
                    f"{spark_catalog.error_line(exc)}"
                ) from exc
            phases["stage"] = time.monotonic() - clock
            try:
                record, plan = committer.commit(
                    started_at=started_at,
                    max_partitions=max_partitions,
                    mark_set_done=mark_set_done,
                    compact=_compaction_hook(compaction, info),
                    phases=phases,
                    archives=isinstance(compaction, CompactionPolicy) and compaction.mode == "har",
                    announce=announce,
                )
            except Exception:
                committer.cleanup_unless_pending()
                committer.end_staging("the commit failed")
                raise
            committer.end_staging(f"published by job {job}")
        clock = time.monotonic()
        spark_errors = _sync_spark_catalog(df.sparkSession, info, plan, record)
        phases["spark_catalog"] = time.monotonic() - clock
        if spark_errors:
            logger.warning("job %s: %d spark catalog statement(s) failed", job, len(spark_errors))
        return dataclasses.replace(
            _result(record, info, mode, plan, phases), spark_catalog_errors=tuple(spark_errors)
        )


def _compaction_hook(
    compaction: CompactionPolicy | CompactHook | None, table: TableInfo
) -> CompactHook | None:
    if compaction is None or not isinstance(compaction, CompactionPolicy):
        return compaction
    policy = compaction

    def run(filesystem: pafs.FileSystem, staged: StagedPartition) -> StagedPartition:
        return compact_staged(
            filesystem, staged, policy=policy, storage_format=table.storage_format
        )

    return run


def create_table(
    table: str,
    schema: StructType,
    *,
    location: str,
    partition_keys: Sequence[str],
    storage_format: str = "parquet",
    retention: timedelta = DEFAULT_RETENTION,
    topic: str | None = None,
    properties: Mapping[str, str] | None = None,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
) -> TableInfo:
    """Register a table (as ``hcat-notify table create``), checking it against a Spark schema.

    With ``spark`` given, the table is also created in that session's catalog (so Spark
    SQL readers see committed partitions); that needs a session with Hive support
    (``SparkSession.builder.enableHiveSupport()``), which is checked before anything is
    registered.

    Args:
        table: ``db.table``.
        schema: the DataFrame schema; the partition keys must be columns of it.
        location: the table's root directory (path or Hadoop path string).
        partition_keys: the partition columns, in directory order.
        storage_format: ``parquet``, ``orc``, ``csv`` or ``json``.
        retention: how long a mark-set-done stays in the retention table.
        topic: a topic name overriding the deployment's strategy.
        properties: table properties.
        settings: deployment settings (default: :func:`load_settings`).
        spark: also create the table in this session's catalog.

    Returns:
        The registered :class:`hcat_notify.TableInfo`.

    Raises:
        PartitionColumnsError: a partition key is not a column of ``schema``.
        SparkCatalogError: ``spark`` has no Hive support, or has no storage format for
            ``storage_format`` (nothing was registered); or Spark refused the table
            after it was registered (the message says so and gives the statement).
        hcat_notify.HcatNotifyError: invalid name, keys or options; table exists.
    """
    names = {name.lower() for name in schema.fieldNames()}
    missing = [key for key in partition_keys if key.lower() not in names]
    if missing:
        raise PartitionColumnsError(
            f"partition key(s) {missing} are not columns of the schema ({sorted(names)})"
        )
    name = TableName.parse(table)
    if spark is not None:
        # Spark's part is checked first: a registration Spark then refuses would make a
        # retry fail with TableExistsError.
        spark_catalog.require_hive_support(spark)
        spark_catalog.create_table_statements(
            name,
            schema,
            partition_keys=partition_keys,
            storage_format=storage_format,
            location=location,
        )
    with Catalog.open(settings or load_settings()) as catalog:
        info = catalog.create_table(
            name,
            location=location,
            partition_keys=partition_keys,
            storage_format=storage_format,
            retention=retention,
            topic=topic,
            properties=properties,
        )
    if spark is not None:
        statements = spark_catalog.create_table_statements(
            name,
            schema,
            partition_keys=partition_keys,
            storage_format=info.storage_format,
            location=TableLocation.parse(info.location).uri,
        )
        for statement in statements:
            try:
                spark.sql(statement)
            except Exception as exc:
                raise SparkCatalogError(
                    f"{name} is registered, but Spark's catalog refused it: "
                    f"{spark_catalog.error_line(exc)}; run in Spark: {statements[-1]}"
                ) from exc
    return info
