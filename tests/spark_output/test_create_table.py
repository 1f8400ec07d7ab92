"""create_table(..., spark=...): Spark's part is checked before anything is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.errors import TableNotFoundError
from hcat_notify.store import Catalog

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]

# One JVM holds one SparkContext, whose catalog implementation is fixed when it starts:
# a session without Hive support needs a process of its own.
_WITHOUT_HIVE = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    from hcat_notify.config import load_settings
    from spark_output import create_table

    home, db_url, warehouse, location = sys.argv[1:]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", warehouse)
        .getOrCreate()
    )
    schema = spark.createDataFrame([], "id long, ds string").schema
    outcomes = [spark.conf.get("spark.sql.catalogImplementation")]
    for attempt in range(2):  # a retry must meet the same error, not TableExistsError
        try:
            create_table(
                "web.nohive",
                schema,
                location=location,
                partition_keys=["ds"],
                settings=load_settings(home=home, db_url=db_url),
                spark=spark,
            )
            outcomes.append("created")
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")
    spark.stop()
    print(json.dumps(outcomes))
    """
)


def test_a_session_without_hive_support_registers_nothing(db_url: str, tmp_path: Path):
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.setdefault("LC_ALL", "C.UTF-8")
    location = tmp_path / "nohive"
    finished = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_HIVE,
            str(tmp_path / "home"),
            db_url,
            str(tmp_path / "warehouse"),
            str(location),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    implementation, *attempts = json.loads(finished.stdout.strip().splitlines()[-1])
    assert implementation == "in-memory"
    assert len(attempts) == 2
    for attempt in attempts:
        assert attempt.startswith("SparkCatalogError: the Spark session's catalog is 'in-memory'")
        assert "enableHiveSupport()" in attempt
        assert "nothing was registered" in attempt
    settings = load_settings(home=tmp_path / "home", db_url=db_url)
    with Catalog.open(settings) as catalog, pytest.raises(TableNotFoundError):
        catalog.get_table("web.nohive")
    assert not location.exists()
