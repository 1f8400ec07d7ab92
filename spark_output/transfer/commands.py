"""``hcat-notify export`` and ``hcat-notify import``.

Registered through the ``hcat_notify.commands`` entry point group, like ``compact`` and
``recover``: an import is published by the same committer as a Spark write, and
``hcat-notify recover`` finishes or undoes one that was interrupted.
"""

from __future__ import annotations

import dataclasses
import sys

import click

from hcat_notify.cli.common import (
    CliContext,
    emit,
    handle_errors,
    output_option,
    progress_bar,
    spec_args,
)

__all__ = ["export", "import_"]


def _show_bar(obj: CliContext) -> bool:
    return obj.output == "text" and sys.stderr.isatty()


@click.command("export")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="[K=V]...")
@click.option(
    "--to", "destination", required=True, metavar="URI", help="Export directory (new or empty)."
)
@output_option
@click.pass_obj
@handle_errors
def export(obj: CliContext, name: str, spec: tuple[str, ...], destination: str) -> None:
    """Copy a table's partitions (matching K=V...) and definition to URI.

    Files go to URI/data/<spec>/, hashed on the way; URI/_hcat_export.json (format
    version, table definition, partition keys, every partition's files with sizes and
    SHA-256 checksums) is written last. HDFS and S3 URIs work. URI must be a new or
    an empty directory, apart from every table's location and the warehouse roots;
    no file is written over or through a link.
    """
    from spark_output.transfer.export import export_table

    with obj.catalog(write=False) as catalog, progress_bar(_show_bar(obj), "exporting") as bar:
        summary = export_table(catalog, name, spec_args(spec), to=destination, progress=bar)
    emit(
        obj,
        dataclasses.asdict(summary),
        lambda: (
            f"exported {summary.partitions} partition(s) of {summary.table}, {summary.files} "
            f"file(s), {summary.bytes:,} bytes, to {summary.destination}"
        ),
    )


@click.command("import")
@click.argument("source", metavar="URI")
@click.option("--as", "target", metavar="DB.TABLE", help="Import as this table.")
@click.option(
    "--location",
    metavar="URI",
    help="Location of a new table (default: the source's, which must lie inside the "
    "warehouse roots).",
)
@click.option(
    "--external",
    is_flag=True,
    help="Register the new table as EXTERNAL_TABLE at --location (required with it).",
)
@click.option("--mark-done", multiple=True, metavar="K=V", help="Announce this set complete too.")
@click.option("--replace", is_flag=True, help="Overwrite partitions that exist (INSERT replace).")
@output_option
@click.pass_obj
@handle_errors
def import_(
    obj: CliContext,
    source: str,
    target: str | None,
    location: str | None,
    external: bool,
    mark_done: tuple[str, ...],
    replace: bool,
) -> None:
    """Import an export: verify every checksum, copy, then register and announce at once.

    The table (if new), its partitions (ADD_PARTITION, or INSERT with replace: true for
    replaced ones) and the done are registered in one transaction, all or nothing;
    'hcat-notify recover' finishes or undoes an interrupted import. Importing the same
    export again does nothing. A new table is managed (inside the warehouse roots) unless
    --external --location URI; the export's own table type is not followed.
    """
    from spark_output.transfer.importer import import_table

    with obj.catalog() as catalog, progress_bar(_show_bar(obj), "importing") as bar:
        summary = import_table(
            catalog,
            source,
            target=target,
            location=location,
            mark_done=spec_args(mark_done),
            replace=replace,
            external=external,
            progress=bar,
        )

    def text() -> str:
        if summary.already_imported:
            return f"{summary.source} was imported into {summary.table} already: nothing to do"
        made = " (new table)" if summary.table_created else ""
        return (
            f"imported {len(summary.partitions_created)} new and "
            f"{len(summary.partitions_replaced)} replaced partition(s) into {summary.table}"
            f"{made}, {summary.files} file(s), {summary.bytes:,} bytes"
        )

    emit(obj, dataclasses.asdict(summary), text)
