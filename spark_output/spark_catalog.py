"""The Spark session's catalog: the statements that keep it in step with the registry.

The registry (hcat_notify's catalog) is the source of truth; Spark's catalog is a
convenience for Spark SQL readers. So a statement Spark refuses after a commit or a
compaction switch is reported, not raised: the registered state stands. Creating a table
is the exception, and it is checked before anything is registered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hcat_notify import DEFAULT_PARTITION_NAME, PartitionSpec, TableName
from spark_output.errors import SparkCatalogError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "PartitionLocation",
    "add_partitions",
    "create_table_statements",
    "drop_partitions",
    "drop_table",
    "error_line",
    "has_table",
    "refresh_table",
    "require_hive_support",
    "set_location",
    "sql_literal",
]

logger = logging.getLogger(__name__)

_STORED_AS = {"parquet": "PARQUET", "orc": "ORC", "csv": "TEXTFILE", "json": "TEXTFILE"}


@dataclass(frozen=True)
class PartitionLocation:
    """A partition to add to Spark's catalog; ``replaced`` re-points an existing one."""

    spec: PartitionSpec
    location: str
    replaced: bool = False


def sql_literal(value: str | None) -> str:
    """A Spark SQL string literal; None is Hive's default partition name."""
    text = DEFAULT_PARTITION_NAME if value is None else value
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _qualified(name: TableName) -> str:
    return f"`{name.db}`.`{name.table}`"


def _partition_clause(spec: PartitionSpec) -> str:
    return ", ".join(f"`{key}` = {sql_literal(value)}" for key, value in spec.items)


def error_line(exc: BaseException) -> str:
    """The first line of a Spark (py4j) error, which carries the reason; the rest is a
    JVM stack trace."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def has_table(spark: SparkSession | None, name: TableName) -> bool:
    """Whether ``spark``'s catalog has the table (False without a session or a catalog)."""
    if spark is None:
        return False
    try:
        return bool(spark.catalog.tableExists(f"{name.db}.{name.table}"))
    except Exception as exc:  # noqa: BLE001 - any Spark/py4j error: no usable catalog
        logger.debug("spark catalog check failed: %s", exc)
        return False


def _run(spark: SparkSession, statement: str, errors: list[str]) -> None:
    try:
        spark.sql(statement)
    except Exception as exc:  # noqa: BLE001 - the registry stands; report the refusal
        errors.append(f"{statement}: {error_line(exc)}")
        logger.warning("spark catalog update failed: %s", error_line(exc))


def add_partitions(
    spark: SparkSession, name: TableName, partitions: Sequence[PartitionLocation]
) -> list[str]:
    """``ALTER TABLE … ADD IF NOT EXISTS PARTITION … LOCATION`` for each partition, plus
    ``SET LOCATION`` for replaced ones; returns the statements Spark refused."""
    errors: list[str] = []
    for partition in partitions:
        clause = _partition_clause(partition.spec)
        location = sql_literal(partition.location)
        _run(
            spark,
            f"ALTER TABLE {_qualified(name)} ADD IF NOT EXISTS PARTITION ({clause}) "
            f"LOCATION {location}",
            errors,
        )
        if partition.replaced:
            _run(
                spark,
                f"ALTER TABLE {_qualified(name)} PARTITION ({clause}) SET LOCATION {location}",
                errors,
            )
    return errors


def drop_partitions(
    spark: SparkSession, name: TableName, specs: Sequence[PartitionSpec]
) -> list[str]:
    """``ALTER TABLE … DROP IF EXISTS PARTITION (…)`` for each spec (files stay: the
    tables this package creates have a LOCATION, so Spark treats them as external);
    returns the statements Spark refused."""
    errors: list[str] = []
    for spec in specs:
        _run(
            spark,
            f"ALTER TABLE {_qualified(name)} DROP IF EXISTS PARTITION ({_partition_clause(spec)})",
            errors,
        )
    return errors


def drop_table(spark: SparkSession, name: TableName) -> list[str]:
    """``DROP TABLE IF EXISTS``; returns the statement if Spark refused it."""
    errors: list[str] = []
    _run(spark, f"DROP TABLE IF EXISTS {_qualified(name)}", errors)
    return errors


def set_location(
    spark: SparkSession, name: TableName, spec: PartitionSpec, location: str
) -> list[str]:
    """``ALTER TABLE … PARTITION (…) SET LOCATION``; returns the statement if Spark refused."""
    errors: list[str] = []
    _run(
        spark,
        f"ALTER TABLE {_qualified(name)} PARTITION ({_partition_clause(spec)}) "
        f"SET LOCATION {sql_literal(location)}",
        errors,
    )
    return errors


def refresh_table(spark: SparkSession, name: TableName) -> list[str]:
    """Drop Spark's cached listing of the table; returns an error line if that failed."""
    try:
        spark.catalog.refreshTable(f"{name.db}.{name.table}")
    except Exception as exc:  # noqa: BLE001 - a stale cache only delays readers
        return [f"refreshTable {name}: {error_line(exc)}"]
    return []


def require_hive_support(spark: SparkSession) -> None:
    """Check that ``spark`` keeps tables in a Hive metastore.

    Spark's in-memory catalog refuses Hive tables (``STORED AS``), and forgets
    everything when the session ends, so it cannot hold a table for other readers.

    Raises:
        SparkCatalogError: the session was built without ``enableHiveSupport()``.
    """
    try:
        implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
    except Exception as exc:
        raise SparkCatalogError(f"cannot read the Spark session's catalog: {exc}") from exc
    if implementation != "hive":
        raise SparkCatalogError(
            f"the Spark session's catalog is {implementation!r}, not a Hive metastore; "
            "build the session with SparkSession.builder.enableHiveSupport() or leave "
            "out spark=; nothing was registered"
        )


def create_table_statements(
    name: TableName,
    schema: StructType,
    *,
    partition_keys: Sequence[str],
    storage_format: str,
    location: str,
) -> list[str]:
    """The statements that create the table in Spark's catalog (idempotent).

    Raises:
        SparkCatalogError: Spark has no Hive storage format for ``storage_format``.
    """
    stored = _STORED_AS.get(storage_format)
    if stored is None:
        raise SparkCatalogError(
            f"cannot create a {storage_format} table in Spark's catalog; "
            f"formats: {', '.join(sorted(_STORED_AS))}"
        )
    keys = [key.lower() for key in partition_keys]
    data = [field for field in schema.fields if field.name.lower() not in keys]
    parts = [field for key in keys for field in schema.fields if field.name.lower() == key]
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in data)
    part_columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in parts)
    return [
        f"CREATE DATABASE IF NOT EXISTS `{name.db}`",
        f"CREATE TABLE IF NOT EXISTS {_qualified(name)} ({columns}) "
        f"PARTITIONED BY ({part_columns}) STORED AS {stored} LOCATION {sql_literal(location)}",
    ]
