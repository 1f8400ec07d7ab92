"""spark_output: the PySpark side of hcat-notify.

The job-level output committer (``write_partitions``), compaction and Hadoop Archives
land here; see the project issues. Partition paths are named with
:mod:`hcat_notify.specs`, exactly as Spark names them.
"""

from hcat_notify.writer import send_mark_set_done
from spark_output.errors import SparkOutputError

__all__ = ["SparkOutputError", "send_mark_set_done"]
