"""The local Spark session the Spark benchmarks run in (write_partitions, compaction_*)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def local_spark(
    app_name: str, *, har_cache: int | None = None, metastore: Path | None = None
) -> Any:
    """A ``local[2]`` session bound to 127.0.0.1, logging errors only.

    Args:
        app_name: Spark's application name.
        har_cache: ``fs.har.metadatacache.entries``: how many archives' parsed indexes
            HarFileSystem keeps (Hadoop's default, 10, makes a scan of more archives than
            that re-read an index for nearly every file it opens).
        metastore: a directory for a Hive-enabled session's own Derby metastore and
            warehouse; None for Spark's in-memory catalog.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers run compact_table's tasks: they need this venv (spark_output).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if metastore is not None:
        metastore.mkdir(parents=True, exist_ok=True)
        builder = (
            builder.config("spark.sql.warehouse.dir", str(metastore / "warehouse"))
            .config(
                "spark.hadoop.javax.jdo.option.ConnectionURL",
                f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true",
            )
            .config(
                "spark.driver.extraJavaOptions",
                f"-Dderby.system.home={metastore} "
                f"-Dderby.stream.error.file={metastore / 'derby.log'}",
            )
            .enableHiveSupport()
        )
    if har_cache is not None:
        builder = builder.config("spark.hadoop.fs.har.metadatacache.entries", str(har_cache))
    spark = (
        builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
