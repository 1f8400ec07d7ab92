"""DataFrames shared by the Spark compaction tests."""

from __future__ import annotations

from typing import Any


def clicks_frame(spark: Any, partitions: int, rows: int, tasks: int) -> Any:
    """``rows`` rows (id, value, datestamp, region) over ``partitions`` regions of one
    datestamp, in ``tasks`` Spark partitions: each task writes one file per region."""
    from pyspark.sql import functions as sf

    return (
        spark.range(0, rows, numPartitions=tasks)
        .withColumn("value", sf.concat(sf.lit("v"), sf.col("id").cast("string")))
        .withColumn("datestamp", sf.lit("20110228"))
        .withColumn("region", sf.format_string("r%02d", sf.col("id") % partitions))
    )
