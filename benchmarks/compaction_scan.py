"""Spark full-scan aggregate before vs after compact_table (merge); HAR read vs plain read.

(a) 100 partitions x 40 small Parquet files (written by write_partitions from a
DataFrame repartitioned into 40 tasks, so each task writes one file per partition),
into a table that is also in the Spark session's catalog (``create_table(...,
spark=spark)``; a Hive-enabled session with its own Derby metastore), as Spark users
query it. A full-scan aggregate (count, sum(id), sum(length(value))) of
``spark.table(name)``, best of 3, before and after ``compact_table(..., mode="merge",
spark=spark)``, which re-points the catalog's partitions; same session. Target:
before / after >= 4. For context, the same aggregate over the list of registered
partition locations (``spark.read.parquet(*locations)``: no catalog, so every scan
lists the directories again and samples a footer for the schema).

(b) The same data written to a second table and archived with ``mode="har"``. The
superseded directories keep the original files, so the same files are read both ways:
through the ``har://`` locations (Hadoop's HarFileSystem) and as plain files. Rounds
alternate; best of 3 each. Target: har / plain <= 1.5.

No broker is needed: the catalog is a SQLite file in a temporary directory.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from _spark import local_spark
from _support import (
    Row,
    drop_workdir,
    footer,
    log,
    machine_line,
    make_settings,
    parser,
    print_table,
    run_main,
)

from hcat_notify.store import Catalog
from spark_output import CompactionPolicy, create_table, write_partitions
from spark_output.maintenance.compact import compact_table


def _frame(spark: Any, rows: int, partitions: int, files: int) -> Any:
    from pyspark.sql import functions as sf

    return (
        spark.range(0, rows, numPartitions=files)
        .withColumn("datestamp", sf.lit("20260101"))
        .withColumn("region", sf.format_string("r%03d", sf.col("id") % partitions))
        .withColumn("user_id", (sf.col("id") * 7919) % 1_000_003)
        .withColumn("value", sf.concat(sf.lit("/page/"), (sf.col("id") % 997).cast("string")))
        .repartition(files)
    )


def _scan(spark: Any, source: str | list[str]) -> tuple[float, tuple[Any, ...]]:
    """Time one full-scan aggregate of the catalog table ``source`` (a name), or over the
    partition directories ``source`` (a list of locations; listing included)."""
    from pyspark.sql import functions as sf

    started = time.monotonic()
    df = spark.table(source) if isinstance(source, str) else spark.read.parquet(*source)
    row = df.agg(sf.count("*"), sf.sum("id"), sf.sum(sf.length("value"))).collect()[0]
    return time.monotonic() - started, tuple(row)


def _best(spark: Any, source: str | list[str], rounds: int) -> tuple[float, tuple[Any, ...]]:
    times = []
    result: tuple[Any, ...] = ()
    for _ in range(rounds):
        elapsed, result = _scan(spark, source)
        times.append(elapsed)
    return min(times), result


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="scans per measurement (3)")
    p.add_argument(
        "--har-cache",
        type=int,
        default=1000,
        help="fs.har.metadatacache.entries for the session (1000; Hadoop's default is 10)",
    )
    args = p.parse_args()
    partitions, files, rows = (10, 40, 200_000) if args.quick else (100, 40, 4_000_000)
    rounds = args.rounds

    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-compaction-scan-"))
    spark = None
    try:
        settings = make_settings(workdir, "stomp://127.0.0.1:1", args.db_url)
        flags = " (--quick)" if args.quick else ""
        print(f"# compaction_scan: {partitions} partitions x {files} files, {rows:,} rows{flags}")
        print(f"# {machine_line()}")
        print(f"# catalog {settings.database_url}; data under {workdir}")
        spark = local_spark(
            "hcat-bench-compaction-scan", har_cache=args.har_cache, metastore=workdir / "metastore"
        )
        df = _frame(spark, rows, partitions, files).cache()
        log(f"materialising {df.count():,} cached rows")
        catalog = Catalog.open(settings)
        try:
            for name in ("bench.scan_merge", "bench.scan_har"):
                create_table(
                    name,
                    df.schema,
                    location=str(workdir / name.split(".")[1]),
                    partition_keys=["datestamp", "region"],
                    settings=settings,
                    spark=spark,
                )
                started = time.monotonic()
                write_partitions(df, name, settings=settings, max_partitions=partitions)
                log(f"wrote {name} in {time.monotonic() - started:.1f}s")
            df.unpersist()
            merge_parts = catalog.list_partitions("bench.scan_merge")
            small_files = sum(p.file_count for p in merge_parts)
            small_bytes = sum(p.total_bytes for p in merge_parts)
            log(f"{len(merge_parts)} partitions, {small_files} files, {small_bytes:,} bytes")

            # (a) merge: scan before, compact, scan after (same session, warm JVM)
            table = "bench.scan_merge"
            before_locations = [p.location for p in merge_parts]
            _scan(spark, table)  # warm-up, not measured
            _scan(spark, before_locations)
            before, before_result = _best(spark, table, rounds)
            paths_before, paths_before_result = _best(spark, before_locations, rounds)
            log(f"scan before: table {before:.2f}s, paths {paths_before:.2f}s {before_result}")
            summary = compact_table(
                catalog,
                "bench.scan_merge",
                policy=CompactionPolicy(min_files=10, mode="merge"),
                spark=spark,
            )
            if not summary.ok:
                raise RuntimeError(f"merge failed: {summary.errors[:3]}")
            log(
                f"merged {summary.partitions_compacted} partitions in {summary.seconds:.1f}s: "
                f"{summary.files_before} -> {summary.files_after} files"
            )
            if summary.spark_catalog_errors:
                raise RuntimeError(f"catalog not re-pointed: {summary.spark_catalog_errors[:3]}")
            after_locations = [p.location for p in catalog.list_partitions(table)]
            _scan(spark, table)  # the first scan after the switch lists the new directories
            after, after_result = _best(spark, table, rounds)
            paths_after, paths_after_result = _best(spark, after_locations, rounds)
            log(f"scan after: table {after:.2f}s, paths {paths_after:.2f}s {after_result}")
            results = {before_result, paths_before_result, after_result, paths_after_result}
            if len(results) != 1:
                raise RuntimeError(f"results differ: {results}")

            # (b) HAR read vs plain read of the same files
            har_summary = compact_table(
                catalog,
                "bench.scan_har",
                policy=CompactionPolicy(min_files=10, mode="har"),
                spark=spark,
            )
            if not har_summary.ok:
                raise RuntimeError(f"har failed: {har_summary.errors[:3]}")
            log(
                f"archived {har_summary.partitions_compacted} partitions in "
                f"{har_summary.seconds:.1f}s"
            )
            har_locations = [p.location for p in catalog.list_partitions("bench.scan_har")]
            plain_locations = list(har_summary.old_locations)
            _scan(spark, har_locations)  # warm-up of HarFileSystem, not measured
            plain_times, har_times = [], []
            plain_result: tuple[Any, ...] = ()
            har_result: tuple[Any, ...] = ()
            for _ in range(rounds):
                elapsed, plain_result = _scan(spark, plain_locations)
                plain_times.append(elapsed)
                elapsed, har_result = _scan(spark, har_locations)
                har_times.append(elapsed)
            log(f"plain {min(plain_times):.2f}s, har {min(har_times):.2f}s")
            if plain_result != har_result:
                raise RuntimeError(f"results differ: {plain_result} vs {har_result}")
        finally:
            catalog.close()

        print_table(
            f"full-scan aggregate, {partitions} partitions, {rows:,} rows",
            [
                Row(
                    f"scan after merge ({summary.files_after} files)",
                    after,
                    before,
                    "s",
                    target=(">=", 4.0),
                    check="ratio",
                    ratio_mode="ref/ours",
                    digits=2,
                ),
                Row(
                    "context: the same over the partition paths (no catalog)",
                    paths_after,
                    paths_before,
                    "s",
                    ratio_mode="ref/ours",
                    digits=2,
                ),
                Row(
                    f"scan via har:// ({small_files} archived files)",
                    min(har_times),
                    min(plain_times),
                    "s",
                    target=("<", 1.5),
                    check="ratio",
                    digits=2,
                ),
                Row(
                    "merge: compact_table time (Spark tasks)", summary.seconds, None, "s", digits=2
                ),
                Row(
                    "har: compact_table time (Spark tasks)",
                    har_summary.seconds,
                    None,
                    "s",
                    digits=2,
                ),
            ],
            [
                "row 1: ours = spark.table(...) aggregate after merge, reference = the same "
                f"scan over the {small_files} small files before; ratio = before / after "
                "(target >= 4); the table is in the session's (Hive) catalog, which "
                "compact_table re-points",
                "row 2: the same aggregate over spark.read.parquet(*registered locations), "
                "which lists every directory and samples a footer on each scan (context)",
                "row 3: ours = scan through the har:// locations, reference = the same files "
                "read plainly (the superseded directories); ratio = har / plain (target <= 1.5; "
                "shown as < 1.5)",
                f"best of {rounds} each, count + sum(id) + sum(length(value)); "
                "local[2], warm JVM, page cache warm for both; "
                f"fs.har.metadatacache.entries={args.har_cache}",
            ],
        )
        footer()
    finally:
        if spark is not None:
            spark.stop()
        drop_workdir(workdir, keep=args.keep)


if __name__ == "__main__":
    run_main(main)
