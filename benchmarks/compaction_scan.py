"""Spark full-scan aggregate before vs after compact_table (merge); HAR read vs plain read.

(a) 100 partitions x 40 small Parquet files (written by write_partitions from a
DataFrame repartitioned into 40 tasks, so each task writes one file per partition),
written twice, into two tables that are also in the Spark session's catalog
(``create_table(..., spark=spark)``; a Hive-enabled session with its own Derby
metastore), as Spark users query them. The first is merged by ``compact_table(...,
mode="merge", spark=spark)``, which re-points the catalog's partitions; then rounds
alternate a full-scan aggregate (count, sum(id), sum(length(value))) of
``spark.table(name)`` over the merged table and over its twin, still 4,000 small files;
best and median of each. Target (issue 13): before / after >= 8. For context, the same
aggregate over the list of registered partition locations (``spark.read.parquet(
*locations)``: no catalog, so every scan lists the directories again and samples a
footer for the schema).

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
    ratio_rows,
    run_main,
)

from hcat_notify.store import Catalog
from spark_output import CompactionPolicy, create_table, write_partitions
from spark_output.maintenance.table_compaction import compact_table


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


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds of each scan (5)")
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

            # (a) merge one table, then alternate scans of it and of its unmerged twin
            table, twin = "bench.scan_merge", "bench.scan_har"
            before_locations = [p.location for p in merge_parts]
            _scan(spark, twin)  # warm-up, not measured
            _scan(spark, before_locations)
            summary = compact_table(
                catalog,
                table,
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
            _scan(spark, after_locations)
            before_times: list[float] = []
            after_times: list[float] = []
            paths_before_times: list[float] = []
            paths_after_times: list[float] = []
            results: set[tuple[Any, ...]] = set()
            for round_no in range(rounds):
                for source, times in (
                    (twin, before_times),
                    (table, after_times),
                    (before_locations, paths_before_times),
                    (after_locations, paths_after_times),
                ):
                    elapsed, result = _scan(spark, source)
                    times.append(elapsed)
                    results.add(result)
                log(
                    f"round {round_no + 1}: before {before_times[-1]:.2f}s, after "
                    f"{after_times[-1]:.2f}s; paths before {paths_before_times[-1]:.2f}s, "
                    f"after {paths_after_times[-1]:.2f}s"
                )
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
                *ratio_rows(
                    f"scan after merge ({summary.files_after} files) vs before",
                    after_times,
                    before_times,
                    unit="s",
                    target=(">=", 8.0),
                    higher_is_better=False,
                    digits=2,
                    ratio_mode="ref/ours",
                ),
                Row(
                    "context: the same over the partition paths (no catalog), best",
                    min(paths_after_times),
                    min(paths_before_times),
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
                "rows 1-2: ours = spark.table(...) aggregate after merge, reference = the same "
                f"scan of its twin table, still {small_files} small files, rounds alternating; "
                "ratio = before / after (target >= 8); both tables are in the session's (Hive) "
                "catalog, which compact_table re-points",
                "row 3: the same aggregate over spark.read.parquet(*registered locations), "
                "which lists every directory and samples a footer on each scan (context)",
                "row 4: ours = scan through the har:// locations, reference = the same files "
                "read plainly (the superseded directories); ratio = har / plain (target <= 1.5; "
                "shown as < 1.5)",
                f"{rounds} rounds each, count + sum(id) + sum(length(value)); "
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
