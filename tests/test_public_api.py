"""Each package's __all__ names exactly what it exports, and every error has one root."""

from __future__ import annotations

import importlib
import inspect

import pytest

import hcat_notify
import spark_output
from hcat_notify import errors

MODULES = [
    "hcat_notify",
    "hcat_notify.broker",
    "hcat_notify.consumer",
    "hcat_notify.errors",
    "hcat_notify.messages",
    "hcat_notify.names",
    "hcat_notify.relay",
    "hcat_notify.settings",
    "hcat_notify.specs",
    "hcat_notify.store",
    "hcat_notify.topics",
    "hcat_notify.wakeup",
    "hcat_notify.writer",
    "spark_output",
    "spark_output.committer",
    "spark_output.errors",
    "spark_output.fs",
    "spark_output.compaction",
    "spark_output.har",
    "spark_output.maintenance",
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
