"""``hcat-notify partitions list|add|drop|discover``: a table's partitions.

``hcat-notify partitions DB.TABLE [K=V...]`` (no subcommand) still lists, as it did
before the group existed: a first argument that is not a subcommand runs ``list``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EXIT_ERROR,
    CliContext,
    emit,
    emit_pages,
    handle_errors,
    output_option,
    progress_bar,
    spec_args,
)
from hcat_notify.cli.tables import partition_dict
from hcat_notify.errors import InvalidInputError
from hcat_notify.lifecycle import discover_partitions, register_partitions
from hcat_notify.lifecycle import drop_partitions as drop
from hcat_notify.model.changes import AnnounceMode

if TYPE_CHECKING:
    from hcat_notify.lifecycle import Discovery
    from hcat_notify.store import PartitionInfo

__all__ = ["partitions"]

_DEFAULT = "list"
_ANNOUNCE = click.Choice([mode.value for mode in AnnounceMode])


def _announce_mode(given: str | None) -> AnnounceMode | None:
    return None if given is None else AnnounceMode(given)


class _DefaultGroup(click.Group):
    """A group that runs ``list`` when its first argument is not a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [_DEFAULT, *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
def partitions() -> None:
    """List, add, drop and discover a table's partitions.

    Without a subcommand, 'partitions DB.TABLE [K=V...]' lists (as 'partitions list').
    """


def _line(item: PartitionInfo) -> str:
    return f"{item.spec}\t{item.location}\t{item.file_count} files\t{item.total_bytes} bytes"


def _lines(found: list[PartitionInfo]) -> str:
    return "\n".join(_line(item) for item in found)


@partitions.command("list")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="[K=V]...")
@output_option
@click.pass_obj
@handle_errors
def list_partitions(obj: CliContext, name: str, spec: tuple[str, ...]) -> None:
    """List a table's registered partitions, optionally matching K=V filters."""
    with obj.catalog(write=False) as catalog:
        emit_pages(
            obj,
            catalog.partitions.pages(name, spec_args(spec)),
            partition_dict,
            _line,
            "no partitions",
        )


@partitions.command("add")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, required=True, metavar="K=V...")
@click.option("--location", required=True, help="Directory (path or URI) holding the files.")
@click.option("--announce", type=_ANNOUNCE, help="Override the table's announce mode.")
@click.option(
    "--outside-warehouse",
    is_flag=True,
    help="Operators only: allow a managed table's partition outside the warehouse roots "
    "(logged; never purged).",
)
@output_option
@click.pass_obj
@handle_errors
def add_partition(
    obj: CliContext,
    name: str,
    spec: tuple[str, ...],
    location: str,
    announce: str | None,
    outside_warehouse: bool,
) -> None:
    """Register a partition whose files are already at --location, and announce it.

    The files are counted and measured (HDFS and S3 URIs work); the partition and its
    ADD_PARTITION are written in one transaction.
    """
    full = spec_args(spec)
    if full is None:  # pragma: no cover - click requires the argument
        raise InvalidInputError("give the partition as K=V...")
    with obj.catalog() as catalog:
        registration = register_partitions(
            catalog,
            name,
            [(full, location)],
            announce=_announce_mode(announce),
            outside_warehouse=outside_warehouse,
        )
    found = list(registration.partitions)
    emit(
        obj,
        {
            "table": str(found[0].table),
            "partitions": [partition_dict(item) for item in found],
            "event_ids": list(registration.event_ids),
        },
        lambda: f"registered {_lines(found)} (event {found[0].event_id})",
    )


@partitions.command("drop")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, required=True, metavar="K=V...")
@click.option("--purge", is_flag=True, help="Also delete the partitions' files.")
@output_option
@click.pass_obj
@handle_errors
def drop_partitions(obj: CliContext, name: str, spec: tuple[str, ...], purge: bool) -> None:
    """Drop every partition matching K=V... (a partial spec drops many); announce each.

    The files stay unless --purge (refused for an external table).
    """

    wanted = spec_args(spec)
    if wanted is None:  # pragma: no cover - click requires the argument
        raise InvalidInputError("give the partitions to drop as K=V...")
    with obj.catalog() as catalog:
        show_bar = purge and obj.output == "text" and sys.stderr.isatty()
        with progress_bar(show_bar, "purging") as progress:
            dropped, purged = drop(catalog, name, wanted, purge=purge, progress=progress)
    data: dict[str, Any] = {
        "table": str(dropped.partitions[0].table),
        "dropped": [partition_dict(item) for item in dropped.partitions],
        "event_ids": list(dropped.event_ids),
        "purged": purge,
        "deleted": purged.deleted,
        "kept": purged.kept,
        "errors": purged.errors,
    }

    def text() -> str:
        gone = set(purged.deleted)
        lines = [
            f"{'dropped and purged' if item.location in gone else 'dropped'} "
            f"{item.spec}\t{item.location}"
            for item in dropped.partitions
        ]
        kept = [f"kept (not deleted): {kept}" for kept in purged.kept]
        return "\n".join(lines + kept + [f"error: {error}" for error in purged.errors])

    emit(obj, data, text)
    if purged.errors:
        sys.exit(EXIT_ERROR)


def _discovery_dict(found: Discovery) -> dict[str, Any]:
    registration = found.registration
    return {
        "table": found.table,
        "dry_run": found.dry_run,
        "found": [
            {
                "spec": str(item.spec),
                "location": item.location,
                "file_count": item.file_count,
                "bytes": item.total_bytes,
            }
            for item in found.found
        ],
        "registered": 0 if registration is None else len(registration.partitions),
        "event_ids": [] if registration is None else list(registration.event_ids),
        "foreign": [{"path": path, "reason": reason} for path, reason in found.foreign],
        "empty": list(found.empty),
    }


@partitions.command("discover")
@click.argument("name", metavar="DB.TABLE")
@click.option("--dry-run", is_flag=True, help="Show what would be registered; change nothing.")
@click.option(
    "--skip-foreign",
    is_flag=True,
    help="Register the partitions found even when other directories are there (reported).",
)
@click.option("--announce", type=_ANNOUNCE, help="Override the table's announce mode.")
@output_option
@click.pass_obj
@handle_errors
def discover(
    obj: CliContext, name: str, dry_run: bool, skip_foreign: bool, announce: str | None
) -> None:
    """Register and announce unregistered K=V/... directories of the table's location.

    Hive's MSCK REPAIR TABLE: names are decoded as Spark writes them; hidden and staging
    directories (_..., ....) are skipped; directories without data files are reported.
    A directory that is not a partition of the table refuses the whole run (nothing is
    registered) unless --skip-foreign.
    """

    with obj.catalog(write=not dry_run) as catalog:
        show_bar = obj.output == "text" and sys.stderr.isatty()
        with progress_bar(show_bar, "listing") as progress:
            found = discover_partitions(
                catalog,
                name,
                dry_run=dry_run,
                skip_foreign=skip_foreign,
                announce=_announce_mode(announce),
                progress=progress,
            )
    data = _discovery_dict(found)

    def text() -> str:
        verb = "would register" if dry_run else "registered"
        lines = [f"{verb} {item['spec']}\t{item['location']}" for item in data["found"]]
        lines += [f"not a partition: {f['path']} ({f['reason']})" for f in data["foreign"]]
        lines += [f"no data files: {path}" for path in data["empty"]]
        return "\n".join(lines) or f"{found.table}: every partition on disk is registered"

    emit(obj, data, text)
