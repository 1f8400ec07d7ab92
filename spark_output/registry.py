"""Writers other than Spark, and drops, with the Spark session's catalog kept in step.

:func:`register_partitions` registers and announces partitions whose files another tool
put in place; :func:`drop_partitions` and :func:`drop_table` unregister and announce
(and, with ``purge``, delete the files). The registry is hcat_notify's
(:func:`hcat_notify.register_partitions`, :func:`hcat_notify.drop_partitions`);
given a Spark session whose catalog has the table, the same change is made there, and
a statement Spark refuses is reported, not raised (docs/lifecycle.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hcat_notify import (
    AnnounceMode,
    Catalog,
    PartitionInfo,
    PartitionSpec,
    Purge,
    Registration,
    Settings,
    TableName,
    load_settings,
)
from hcat_notify import drop_partitions as drop_registered
from hcat_notify import drop_table as drop_registered_table
from hcat_notify import register_partitions as register_measured
from spark_output import spark_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DropResult", "drop_partitions", "drop_table", "register_partitions"]

SpecLike = PartitionSpec | Mapping[str, str | None]


@dataclass(frozen=True)
class DropResult:
    """What a drop unregistered, deleted (``purge``) and what Spark's catalog refused."""

    table: str
    partitions: tuple[PartitionInfo, ...]
    event_ids: tuple[int, ...]
    purge: Purge
    spark_catalog_errors: tuple[str, ...] = ()


def register_partitions(
    table: str,
    locations: Mapping[str, str] | Sequence[tuple[SpecLike, str]],
    *,
    mark_set_done: SpecLike | None = None,
    announce: AnnounceMode | None = None,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
) -> tuple[Registration, list[str]]:
    """Register partitions whose files exist already and announce them, in one transaction.

    Args:
        table: ``db.table``.
        locations: full spec (``k=v/...`` or a mapping) -> the directory holding its files.
        mark_set_done: a (partial) spec announced complete in the same transaction.
        announce: ``partition`` or ``write``; default the table's property.
        settings: deployment settings (default: :func:`hcat_notify.load_settings`).
        spark: also add the partitions to this session's catalog, if it has the table.

    Returns:
        The registration, and the statements Spark's catalog refused.

    Raises:
        hcat_notify.LocationNotFoundError: a location is missing or holds no data files.
        hcat_notify.PartitionExistsError: a partition is registered already.
        hcat_notify.InvalidInputError: a spec is not a full spec of the table.
    """
    with Catalog.open(settings or load_settings()) as catalog:
        registration = register_measured(
            catalog, table, locations, mark_set_done=mark_set_done, announce=announce
        )
    name = TableName.parse(table)
    if not spark_catalog.has_table(spark, name):
        return registration, []
    assert spark is not None  # has_table is False without a session
    errors = spark_catalog.add_partitions(
        spark,
        name,
        [
            spark_catalog.PartitionLocation(partition.spec, partition.location)
            for partition in registration.partitions
        ],
    )
    return registration, errors


def drop_partitions(
    table: str,
    spec: SpecLike,
    *,
    purge: bool = False,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
) -> DropResult:
    """Drop every partition matching ``spec`` (partial specs drop many) and announce each
    drop; ``purge`` also deletes their files; ``spark`` drops them from its catalog too.

    Raises:
        hcat_notify.InvalidInputError: no partition matches, a key the table does not
            have, or ``purge`` on an external table (nothing is dropped).
    """
    with Catalog.open(settings or load_settings()) as catalog:
        dropped, purged = drop_registered(catalog, table, spec, purge=purge)
    name = TableName.parse(table)
    errors: list[str] = []
    if spark_catalog.has_table(spark, name):
        assert spark is not None
        errors = spark_catalog.drop_partitions(
            spark, name, [item.spec for item in dropped.partitions]
        )
    return DropResult(str(name), dropped.partitions, dropped.event_ids, purged, tuple(errors))


def drop_table(
    table: str,
    *,
    purge: bool = False,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
) -> DropResult:
    """Drop a table (partitions, retained dones) and announce DROP_TABLE; ``purge`` also
    deletes its files; ``spark`` drops it from the session's catalog too."""
    with Catalog.open(settings or load_settings()) as catalog:
        dropped, purged = drop_registered_table(catalog, table, purge=purge)
    name = dropped.table.name
    errors: list[str] = []
    if spark_catalog.has_table(spark, name):
        assert spark is not None
        errors = spark_catalog.drop_table(spark, name)
    return DropResult(str(name), dropped.partitions, dropped.event_ids, purged, tuple(errors))
