"""``hcat-notify compact`` and ``hcat-notify recover``: the Spark side's commands.

Registered with the ``hcat-notify`` command line through the ``hcat_notify.commands``
entry point group; importing this module costs click and nothing of Spark or pyarrow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import click
from click.core import ParameterSource

from hcat_notify import InvalidInputError
from hcat_notify.cli.common import (
    EXIT_ERROR,
    CliContext,
    emit,
    fail,
    handle_errors,
    output_option,
    parse_duration,
    progress_bar,
    spec_args,
)
from spark_output.compaction.policy import CompactionPolicy
from spark_output.errors import SparkOutputError

__all__ = ["compact", "recover"]


@click.command("recover")
@click.argument("name", required=False, metavar="[DB.TABLE]")
@click.option("--force", is_flag=True, help="Also writes whose process still seems alive.")
@output_option
@click.pass_obj
@handle_errors
def recover(obj: CliContext, name: str | None, force: bool) -> None:
    """Roll interrupted writes forward or back so files, registry and messages agree."""
    from spark_output.commit.recovery import RecoveryAction
    from spark_output.commit.recovery import recover as recover_writes

    with obj.catalog() as catalog:
        if name is not None and not catalog.commits.pending(name):
            catalog.get_table(name)  # an unknown table is an error; an import's is pending
        outcomes = recover_writes(catalog, name, force=force)
    emit(
        obj,
        [
            {"job_id": o.job_id, "table": o.table, "action": o.action.value}
            | ({"reason": o.reason} if o.reason else {})
            for o in outcomes
        ],
        lambda: (
            "\n".join(
                f"{o.job_id}\t{o.table}\t{o.action.value}" + (f": {o.reason}" if o.reason else "")
                for o in outcomes
            )
            or "nothing to recover"
        ),
    )
    if any(o.action is RecoveryAction.REFUSED for o in outcomes):
        sys.exit(EXIT_ERROR)  # an entry needs a look: its plan is not the job's own


_COMPACT_ONLY = {
    "mode": "--mode",
    "min_files": "--min-files",
    "small_file_mb": "--small-file-mb",
    "spark_master": "--spark",
}


@click.command("compact")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="[K=V]...")
@click.option("--mode", type=click.Choice(["merge", "har"]), default="merge", show_default=True)
@click.option("--min-files", type=click.IntRange(min=2), default=10, show_default=True)
@click.option(
    "--small-file-mb",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Files under this size count as small.",
)
@click.option(
    "--spark",
    "spark_master",
    metavar="MASTER",
    help="Compact each partition as a task of a Spark session with this master "
    "(local[2], yarn, spark://host:7077); default: threads of this process.",
)
@click.option(
    "--purge",
    is_flag=True,
    help="Do not compact: delete the directories earlier compactions superseded, "
    "once older than --older-than, no longer registered and safe to lose.",
)
@click.option(
    "--older-than",
    metavar="AGE",
    help="With --purge: keep directories superseded less than AGE ago (7d, 12h, 30m), "
    "for readers that listed them before the switch.  [default: 1h]",
)
@click.option("--dry-run", is_flag=True, help="Show what would be done; change nothing.")
@output_option
@click.pass_obj
@handle_errors
def compact(
    obj: CliContext,
    name: str,
    spec: tuple[str, ...],
    mode: str,
    min_files: int,
    small_file_mb: int,
    spark_master: str | None,
    purge: bool,
    older_than: str | None,
    dry_run: bool,
) -> None:
    """Compact existing partitions' small files (merge or HAR), swapping each atomically.

    With --purge, delete instead the old directories earlier compactions left for
    readers; afterwards, scans of the table directory by path no longer see those
    partitions (readers through the registry or the catalog are not affected).
    """
    ctx = click.get_current_context()
    if purge:
        given = [
            flag
            for param, flag in _COMPACT_ONLY.items()
            if ctx.get_parameter_source(param) != ParameterSource.DEFAULT
        ]
        if given:
            raise InvalidInputError(
                f"{', '.join(given)} cannot be combined with --purge, which only deletes "
                "superseded directories"
            )
    elif older_than is not None:
        raise InvalidInputError("--older-than only applies with --purge")
    try:
        if purge:
            _purge(obj, name, spec, older_than=older_than, dry_run=dry_run)
        else:
            policy = CompactionPolicy(
                min_files=min_files,
                small_file_bytes=small_file_mb * 1024 * 1024,
                target_file_bytes=small_file_mb * 1024 * 1024,
                mode="har" if mode == "har" else "merge",
            )
            _compact(obj, name, spec, policy=policy, spark_master=spark_master, dry_run=dry_run)
    except SparkOutputError as exc:  # e.g. merge on a CSV table: a user mistake
        fail(str(exc))


def _compact(
    obj: CliContext,
    name: str,
    spec: tuple[str, ...],
    *,
    policy: CompactionPolicy,
    spark_master: str | None,
    dry_run: bool,
) -> None:
    from spark_output.maintenance.table_compaction import compact_table
    from spark_output.session import spark_session

    with obj.catalog() as catalog, contextlib.ExitStack() as stack:
        info = catalog.get_table(name)
        partial = spec_args(spec)
        if partial is not None:
            info.spec(partial, partial=True)  # a bad key fails before Spark starts
        # A dry run only plans, on this machine: no Spark needed.
        spark = (
            stack.enter_context(spark_session(spark_master))
            if spark_master is not None and not dry_run
            else None
        )
        show_bar = obj.output == "text" and not dry_run and sys.stderr.isatty()
        progress = stack.enter_context(progress_bar(show_bar, "compacting"))
        summary = compact_table(
            catalog,
            str(info.name),
            partial,
            policy=policy,
            spark=spark,
            dry_run=dry_run,
            progress=progress,
        )
        application = str(spark.sparkContext.applicationId) if spark is not None else None
    data = {
        "table": summary.table,
        "mode": summary.mode,
        "dry_run": summary.dry_run,
        "spark_application": application,
        "considered": summary.partitions_considered,
        "compacted": summary.partitions_compacted,
        "skipped": summary.partitions_skipped,
        "failed": summary.partitions_failed,
        "files_before": summary.files_before,
        "files_after": summary.files_after,
        "bytes_before": summary.bytes_before,
        "bytes_after": summary.bytes_after,
        "seconds": round(summary.seconds, 3),
        "errors": list(summary.errors),
        "old_locations": list(summary.old_locations),
        "spark_catalog_errors": list(summary.spark_catalog_errors),
    }

    def text() -> str:
        verb = "would compact" if summary.dry_run else "compacted"
        lines = [
            f"{summary.table}: {verb} {summary.partitions_compacted} of "
            f"{summary.partitions_considered} partition(s) ({summary.mode}), "
            f"{summary.partitions_skipped} skipped, {summary.partitions_failed} failed",
            f"files {summary.files_before} -> {summary.files_after}, "
            f"bytes {summary.bytes_before:,} -> {summary.bytes_after:,}, {summary.seconds:.1f} s",
        ]
        lines += [f"error: {error}" for error in summary.errors]
        lines += [f"spark catalog: {error}" for error in summary.spark_catalog_errors]
        if summary.old_locations:
            lines.append(
                f"{len(summary.old_locations)} superseded location(s) kept for readers "
                "(hcat-notify compact --purge deletes them later)"
            )
        return "\n".join(lines)

    emit(obj, data, text)
    if not summary.ok:
        sys.exit(EXIT_ERROR)


_PURGE_LABELS = {
    "deleted": "deleted",
    "planned": "would delete",
    "kept": "kept",
    "refused": "refused",
    "failed": "failed",
}


def _purge(
    obj: CliContext, name: str, spec: tuple[str, ...], *, older_than: str | None, dry_run: bool
) -> None:
    from spark_output.maintenance.purge import DEFAULT_PURGE_AGE, purge_superseded

    age = parse_duration(older_than) if older_than is not None else DEFAULT_PURGE_AGE
    with obj.catalog() as catalog:
        info = catalog.get_table(name)
        show_bar = obj.output == "text" and not dry_run and sys.stderr.isatty()
        with progress_bar(show_bar, "purging") as progress:
            summary = purge_superseded(
                catalog,
                str(info.name),
                spec_args(spec),
                older_than=age,
                dry_run=dry_run,
                progress=progress,
            )
    data = {
        "table": summary.table,
        "dry_run": summary.dry_run,
        "older_than": summary.older_than,
        "deleted": summary.directories_deleted,
        "files_deleted": summary.files_deleted,
        "bytes_freed": summary.bytes_freed,
        "kept": summary.directories_kept,
        "refused": summary.directories_refused,
        "failed": summary.directories_failed,
        "seconds": round(summary.seconds, 3),
        "directories": [dataclasses.asdict(result) for result in summary.results],
        "errors": list(summary.errors),
    }

    def text() -> str:
        verb = "would purge" if summary.dry_run else "purged"
        lines = [
            f"{summary.table}: {verb} {summary.directories_deleted} superseded "
            f"director{'y' if summary.directories_deleted == 1 else 'ies'} "
            f"({summary.files_deleted} files, {summary.bytes_freed:,} bytes freed), "
            f"{summary.directories_kept} kept, {summary.directories_refused} refused, "
            f"{summary.directories_failed} failed"
        ]
        for result in summary.results:
            reason = f": {result.reason}" if result.reason else ""
            lines.append(f"{_PURGE_LABELS[result.status]}: {result.location}{reason}")
        return "\n".join(lines)

    emit(obj, data, text)
    if not summary.ok:
        sys.exit(EXIT_ERROR)
