"""Each package's __all__ names exactly what it exports, and every error has one root."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import hcat_notify
import spark_output
from hcat_notify import errors

MODULES = [
    "hcat_notify",
    "hcat_notify.airflow",
    "hcat_notify.airflow.hooks",
    "hcat_notify.airflow.provider",
    "hcat_notify.airflow.sensors",
    "hcat_notify.airflow.stream",
    "hcat_notify.airflow.triggers",
    "hcat_notify.airflow.waiting",
    "hcat_notify.api",
    "hcat_notify.api.app",
    "hcat_notify.api.client",
    "hcat_notify.api.contract",
    "hcat_notify.api.datamodels",
    "hcat_notify.api.problems",
    "hcat_notify.api.protocol",
    "hcat_notify.api.routing",
    "hcat_notify.broker",
    "hcat_notify.broker.backoff",
    "hcat_notify.broker.connection",
    "hcat_notify.broker.errors",
    "hcat_notify.cli",
    "hcat_notify.cli.common",
    "hcat_notify.config",
    "hcat_notify.consumer",
    "hcat_notify.consumer.catchup",
    "hcat_notify.consumer.consumer",
    "hcat_notify.consumer.durable",
    "hcat_notify.consumer.matching",
    "hcat_notify.consumer.reader",
    "hcat_notify.consumer.topics",
    "hcat_notify.consumer.watermarks",
    "hcat_notify.notification",
    "hcat_notify.errors",
    "hcat_notify.files",
    "hcat_notify.lazy",
    "hcat_notify.lifecycle",
    "hcat_notify.model",
    "hcat_notify.model.changes",
    "hcat_notify.model.completeness",
    "hcat_notify.model.rule_values",
    "hcat_notify.model.events",
    "hcat_notify.model.names",
    "hcat_notify.model.principals",
    "hcat_notify.model.specs",
    "hcat_notify.model.topics",
    "hcat_notify.model.set_events",
    "hcat_notify.model.wire",
    "hcat_notify.relay",
    "hcat_notify.relay.config",
    "hcat_notify.relay.publisher",
    "hcat_notify.store",
    "hcat_notify.store.catalog",
    "hcat_notify.store.completeness",
    "hcat_notify.store.set_records",
    "hcat_notify.store.set_reports",
    "hcat_notify.store.set_rules",
    "hcat_notify.store.sets_view",
    "hcat_notify.store.change_feed",
    "hcat_notify.store.announce",
    "hcat_notify.store.journal",
    "hcat_notify.store.table_changes",
    "hcat_notify.store.quick",
    "hcat_notify.store.records",
    "hcat_notify.writer",
    "hcat_notify.safe_delete",
    "hcat_notify.warehouse",
    "spark_output",
    "spark_output.cli",
    "spark_output.commit",
    "spark_output.commit.committer",
    "spark_output.commit.moves",
    "spark_output.commit.plan",
    "spark_output.commit.recovery",
    "spark_output.compaction",
    "spark_output.compaction.checksum",
    "spark_output.compaction.har",
    "spark_output.compaction.har.codec",
    "spark_output.compaction.har.index",
    "spark_output.compaction.har.locations",
    "spark_output.compaction.har.partition",
    "spark_output.compaction.har.reader",
    "spark_output.compaction.har.writer",
    "spark_output.compaction.manifest",
    "spark_output.compaction.merge",
    "spark_output.compaction.partition",
    "spark_output.compaction.policy",
    "spark_output.compaction.read",
    "spark_output.compaction.result",
    "spark_output.compaction.rewrite_format",
    "spark_output.compaction.staged",
    "spark_output.errors",
    "spark_output.fs",
    "spark_output.maintenance",
    "spark_output.maintenance.marker",
    "spark_output.maintenance.purge",
    "spark_output.maintenance.table_compaction",
    "spark_output.registry",
    "spark_output.session",
    "spark_output.spark_catalog",
    "spark_output.transfer",
    "spark_output.transfer.commands",
    "spark_output.transfer.export",
    "spark_output.transfer.importer",
    "spark_output.transfer.manifest",
    "spark_output.writer",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist_once(name):
    module = importlib.import_module(name)
    assert len(set(module.__all__)) == len(module.__all__)
    missing = [item for item in module.__all__ if not hasattr(module, item)]
    assert missing == []


def test_package_exports_every_public_error():
    public = {
        name
        for name, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, Exception)
    }
    assert public <= set(hcat_notify.__all__)


def test_one_root_exception_per_package():
    for _, obj in inspect.getmembers(errors, inspect.isclass):
        if issubclass(obj, Exception):
            assert issubclass(obj, hcat_notify.HcatNotifyError)
    assert issubclass(spark_output.SparkOutputError, Exception)
    assert not issubclass(spark_output.SparkOutputError, hcat_notify.HcatNotifyError)


def test_spark_output_re_exports_send_mark_set_done():
    assert spark_output.send_mark_set_done is hcat_notify.send_mark_set_done


def test_spark_output_re_exports_expect_sets():
    assert spark_output.expect_sets is hcat_notify.expect_sets


@pytest.mark.parametrize(
    ("package", "heavy"),
    [
        (
            "hcat_notify",
            ["stomp", "alembic", "sqlalchemy", "pyspark", "spark_output", "fastapi", "httpx"],
        ),
        ("hcat_notify.api", ["fastapi", "uvicorn", "httpx", "prometheus_client", "sqlalchemy"]),
        # Only the sensors, triggers and hook import Airflow, on first use.
        ("hcat_notify.airflow", ["airflow", "stomp", "sqlalchemy"]),
        ("hcat_notify.airflow.waiting", ["airflow"]),
        ("hcat_notify.airflow.stream", ["airflow"]),
        ("hcat_notify.airflow.provider", ["airflow", "hcat_notify.config"]),
        ("spark_output", ["pyspark", "pyarrow", "stomp", "alembic", "sqlalchemy"]),
        (
            "hcat_notify.cli",
            ["stomp", "alembic", "sqlalchemy", "spark_output", "fastapi", "uvicorn", "httpx"],
        ),
    ],
)
def test_importing_a_package_loads_nothing_heavy(package, heavy):
    script = f"import sys, {package}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dir_lists_every_lazy_name():
    for package in (hcat_notify, spark_output):
        assert set(package.__all__) <= set(dir(package))


def test_schema_revision_is_alembics_head():
    from hcat_notify.store.engine import head_revision
    from hcat_notify.store.revision import SCHEMA_REVISION

    assert head_revision() == SCHEMA_REVISION
