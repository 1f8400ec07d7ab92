"""``hcat-notify table ...`` and ``topic``: the catalog's tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EXIT_ERROR,
    CliContext,
    emit,
    emit_pages,
    format_duration,
    handle_errors,
    output_option,
    parse_duration,
    progress_bar,
)
from hcat_notify.cli.completeness import expect, rule_dict
from hcat_notify.errors import InvalidInputError

if TYPE_CHECKING:
    from datetime import timedelta

    from hcat_notify.store import PartitionInfo, TableInfo

__all__ = ["partition_dict", "table", "table_dict", "topic"]


def table_dict(table: TableInfo) -> dict[str, Any]:
    """A table as ``-o json`` shows it."""
    from hcat_notify.model.topics import destination_for

    return {
        "table": str(table.name),
        "db": table.name.db,
        "name": table.name.table,
        "location": table.location,
        "format": table.storage_format,
        "partition_keys": list(table.partition_keys),
        "table_type": table.table_type,
        "properties": dict(table.properties),
        "retention": format_duration(table.retention),
        "retention_seconds": table.retention.total_seconds(),
        "topic": table.topic,
        "destination": destination_for(table.topic),
        "created_at": table.created_at,
        "version": table.version,
        "rule_version": table.rule_version,
    }


def partition_dict(partition: PartitionInfo) -> dict[str, Any]:
    """A partition as ``-o json`` shows it."""
    return {
        "spec": partition.spec.to_path(),
        "values": partition.spec.as_dict(),
        "location": partition.location,
        "file_count": partition.file_count,
        "bytes": partition.total_bytes,
        "archived": partition.archived,
        "job_id": partition.job_id,
        "event_id": partition.event_id,
        "created_at": partition.created_at,
    }


def _format_table(data: dict[str, Any]) -> str:
    rows = [
        ("table", data["table"]),
        ("location", data["location"]),
        ("format", data["format"]),
        ("partition keys", ", ".join(data["partition_keys"])),
        ("table type", data["table_type"]),
        ("retention", data["retention"]),
        ("topic", data["topic"]),
        ("destination", data["destination"]),
        ("created", data["created_at"].isoformat(timespec="seconds")),
        ("version", str(data["version"])),
    ]
    rule = data.get("rule")
    if rule is not None:
        rows.append(("rule", f"version {rule['version']}: {rule['describe']}"))
    rows += [(f"property {key}", value) for key, value in sorted(data["properties"].items())]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _get_table(obj: CliContext, name: str) -> TableInfo:
    """One table, read the cheapest way there is (see :func:`hcat_notify.store.quick_table`)."""
    from hcat_notify.store.quick import quick_table

    found = quick_table(obj.settings, name)
    if found is not None:
        return found
    with obj.catalog(write=False) as catalog:
        return catalog.get_table(name)


@click.group()
def table() -> None:
    """Register, inspect and drop tables."""


@table.command("create")
@click.argument("name", metavar="DB.TABLE")
@click.option("--location", required=True, help="Table root directory or URI.")
@click.option("--partition-keys", required=True, help="Ordered keys, comma-separated: k1,k2.")
@click.option(
    "--format",
    "storage_format",
    type=click.Choice(["parquet", "orc", "csv", "json"]),
    default="parquet",
    show_default=True,
)
@click.option(
    "--retention", default="7d", show_default=True, help="How long mark-set-done messages are kept."
)
@click.option("--topic", help="Topic name for this table (hcat.msgbus.topic.name).")
@click.option(
    "--external",
    is_flag=True,
    help="Register as EXTERNAL_TABLE: any location, and no purge ever deletes its data.",
)
@click.option(
    "--outside-warehouse",
    is_flag=True,
    help="Operators only: allow a managed table's location outside the warehouse roots "
    "(logged; its data is never purged).",
)
@click.option(
    "--announce",
    type=click.Choice(["partition", "write"]),
    help="One ADD_PARTITION per partition (default) or one per write, split under the "
    "byte cap (table property hcat.notify.announce).",
)
@output_option
@click.pass_obj
@handle_errors
def table_create(
    obj: CliContext,
    name: str,
    location: str,
    partition_keys: str,
    storage_format: str,
    retention: str,
    topic: str | None,
    external: bool,
    outside_warehouse: bool,
    announce: str | None,
) -> None:
    """Register a partitioned table and announce it (CREATE_TABLE on the prefix topic)."""
    keys = [key.strip() for key in partition_keys.split(",")]
    if any(not key for key in keys):
        raise InvalidInputError(f"empty partition key in {partition_keys!r}")
    period = parse_duration(retention)
    from hcat_notify.store.records import MAX_RETENTION
    from hcat_notify.store.tables import MIN_RETENTION

    if not MIN_RETENTION <= period <= MAX_RETENTION:
        # Named as given: the store would show the timedelta ("3000000 days, 0:00:00").
        raise InvalidInputError(
            f"retention must be between 1 second and {MAX_RETENTION.days} days, got {retention}"
        )
    with obj.catalog() as catalog:
        info = catalog.create_table(
            name,
            location=location,
            partition_keys=keys,
            storage_format=storage_format,
            table_type="EXTERNAL_TABLE" if external else "MANAGED_TABLE",
            retention=period,
            topic=topic,
            properties={"hcat.notify.announce": announce} if announce else None,
            outside_warehouse=outside_warehouse,
        )
    _warn_outlives_outbox(obj, retention, period)
    emit(obj, table_dict(info), lambda: f"created {info.name} (topic {info.topic})")


def _warn_outlives_outbox(obj: CliContext, given: str, period: timedelta) -> None:
    """One line on stderr when the dones outlive the outbox's events (not an error)."""
    outbox = obj.settings.outbox_retention_period
    if outbox is not None and period > outbox:
        click.echo(
            f"hcat-notify: warning: retention {given} is longer than outbox_retention "
            f"({obj.settings.outbox_retention}): a consumer that keeps a cursor and is away "
            "longer than that gets HistoryGoneError while the dones are still kept "
            "(docs/operations.md, The outbox's retention)",
            err=True,
        )


@table.command("show")
@click.argument("name", metavar="DB.TABLE")
@output_option
@click.pass_obj
@handle_errors
def table_show(obj: CliContext, name: str) -> None:
    """Show a table's definition, topic and completeness rule."""
    info = _get_table(obj, name)
    data = table_dict(info)
    if info.rule_version is not None:
        with obj.catalog(write=False) as catalog:
            data["rule"] = rule_dict(catalog.sets.rule(info.name))
    else:
        data["rule"] = None
    emit(obj, data, lambda: _format_table(data))


table.add_command(expect)


@table.command("list")
@click.option("--db", help="Only this database.")
@output_option
@click.pass_obj
@handle_errors
def table_list(obj: CliContext, db: str | None) -> None:
    """List registered tables (by name, read and printed a page at a time)."""
    with obj.catalog(write=False) as catalog:
        emit_pages(
            obj,
            catalog.tables.pages(db),
            table_dict,
            lambda info: f"{info.name}\t{info.topic}\t{info.location}",
            "no tables",
        )


@click.command()
@click.argument("name", metavar="DB.TABLE")
@output_option
@click.pass_obj
@handle_errors
def topic(obj: CliContext, name: str) -> None:
    """Print the topic a table's messages go to."""
    from hcat_notify.model.topics import destination_for

    info = _get_table(obj, name)
    emit(
        obj,
        {"table": str(info.name), "topic": info.topic, "destination": destination_for(info.topic)},
        lambda: info.topic,
    )


@table.command("drop")
@click.argument("name", metavar="DB.TABLE")
@click.option("--purge", is_flag=True, help="Also delete the table's files (not external tables).")
@output_option
@click.pass_obj
@handle_errors
def table_drop(obj: CliContext, name: str, purge: bool) -> None:
    """Drop a table with its partitions and retained dones; announce DROP_TABLE.

    Files stay unless --purge. The DROP_TABLE goes to the prefix topic and to the
    table's own topic, so its subscribers learn that it is gone.
    """
    import sys

    from hcat_notify.lifecycle import drop_table

    with obj.catalog() as catalog:
        show_bar = purge and obj.output == "text" and sys.stderr.isatty()
        with progress_bar(show_bar, "purging") as progress:
            dropped, purged = drop_table(catalog, name, purge=purge, progress=progress)
    data = {
        "table": str(dropped.table.name),
        "partitions": len(dropped.partitions),
        "event_ids": list(dropped.event_ids),
        "purged": purge,
        "deleted": purged.deleted,
        "kept": purged.kept,
        "errors": purged.errors,
    }
    emit(
        obj,
        data,
        lambda: "\n".join(
            [
                f"dropped {dropped.table.name} with {len(dropped.partitions)} partition(s)"
                + (f", deleted {', '.join(purged.deleted)}" if purged.deleted else "")
            ]
            + [f"kept (not deleted): {kept}" for kept in purged.kept]
            + [f"error: {error}" for error in purged.errors]
        ),
    )
    if purged.errors:
        sys.exit(EXIT_ERROR)
