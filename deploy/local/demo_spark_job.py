"""The demo's Spark job: a generated DataFrame over dozens of partitions, written with
write_partitions(..., mark_set_done={"datestamp": ...}). Settings come from the
environment (HCAT_NOTIFY_HOME etc.), as for any writer.

Usage: python deploy/local/demo_spark_job.py DATESTAMP
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from spark_output import write_partitions

REGIONS = ["us", "eu", "apac", "latam", "africa", "mena"]
HOURS = 8


def main(datestamp: str) -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("hcat-notify-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    regions = sf.array(*[sf.lit(region) for region in REGIONS])
    df = (
        spark.range(0, 60_000)
        .withColumn("user_id", (sf.col("id") * 7919) % 100_000)
        .withColumn("url", sf.concat(sf.lit("/page/"), (sf.col("id") % 97).cast("string")))
        .withColumn("datestamp", sf.lit(datestamp))
        .withColumn("region", sf.element_at(regions, (sf.col("id") % len(REGIONS) + 1).cast("int")))
        .withColumn(
            "hour", sf.format_string("%02d", (sf.col("id") / len(REGIONS)).cast("long") % HOURS)
        )
        .withColumn("region", sf.concat_ws("-", "region", "hour"))
        .drop("hour")
    )
    started = time.monotonic()
    result = write_partitions(df, "demo.clicks", mark_set_done={"datestamp": datestamp})
    elapsed = time.monotonic() - started
    print(
        f"write_partitions: job {result.job_id}: {len(result.partitions_created)} new partitions, "
        f"{result.files} files, {result.bytes:,} bytes in {elapsed:.1f} s; "
        f"ADD_PARTITION events {result.event_ids[0]}..{result.event_ids[-1]}, "
        f"MARK_SET_DONE event {result.done_event_id}"
    )
    phases = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in result.phase_seconds.items())
    print(f"phases: {phases}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
