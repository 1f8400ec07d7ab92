"""A Spark session for one maintenance command, started and stopped around it."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from hcat_notify import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["is_local_master", "spark_session"]

logger = logging.getLogger(__name__)


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


@contextlib.contextmanager
def spark_session(master: str) -> Iterator[SparkSession]:
    """A Spark session with ``master`` for one command, stopped at its end.

    A session already running in this process (the command called from a Spark driver)
    is used as it is and left running. Executors run this interpreter
    (``PYSPARK_PYTHON`` defaults to it), so they can import spark_output; a local master
    binds to 127.0.0.1. Further settings come from Spark's own configuration
    (``SPARK_CONF_DIR/spark-defaults.conf``).

    Raises:
        ConfigError: pyspark is not installed, or Spark does not start.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError(
            f"--spark needs pyspark, which is not installed ({exc}); "
            "install it with: pip install 'hcat-notify[spark]'"
        ) from exc
    from pyspark import SparkContext

    running: SparkSession | None = None
    with contextlib.suppress(Exception):  # no active or default session
        running = SparkSession.active()
    if running is None and getattr(SparkContext, "_active_spark_context", None) is not None:
        running = SparkSession.builder.getOrCreate()  # a bare SparkContext: not ours either
    if running is not None:
        if running.sparkContext.master != master:
            logger.warning(
                "using the running Spark session (master %s), not %s",
                running.sparkContext.master,
                master,
            )
        yield running
        return
    local = is_local_master(master)
    env = {"PYSPARK_PYTHON": sys.executable, **({"SPARK_LOCAL_IP": "127.0.0.1"} if local else {})}
    saved = {key: os.environ.get(key) for key in env}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    try:
        builder = (
            SparkSession.builder.master(master)
            .appName("hcat-notify-compact")
            .config("spark.ui.showConsoleProgress", "false")
        )
        if local:
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
                "spark.driver.host", "127.0.0.1"
            )
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a bad master URL, no cluster there: one line
        lines = [line for line in str(exc).splitlines() if line.strip()]
        reason = lines[0].strip() if lines else type(exc).__name__
        raise ConfigError(f"cannot start Spark with master {master!r}: {reason}") from exc
    finally:
        # The JVM and the context have read them; do not leak them into the caller.
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
    verbose = logging.getLogger().getEffectiveLevel() <= logging.INFO
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    try:
        yield session
    finally:
        session.stop()
