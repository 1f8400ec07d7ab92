"""The example sensor DAG under ``airflow dags test`` (a real Airflow with its own SQLite
metadata database), a real broker and an ``hcat-notify relay`` process."""

from __future__ import annotations

import json
import re

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import TableInfo
from tests.integration.airflow.support import TEST_DAGS, AirflowHome, AirflowProcess
from tests.integration.delivery import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

DAG = "hcat_wait_for_clicks"
DAY = "2011-02-28"
SPEC = "datestamp=20110228"


def dags_test(
    home: AirflowHome, settings: Settings, table: TableInfo, **env: str
) -> AirflowProcess:
    return AirflowProcess(
        home,
        home.env(settings, **env),
        "dags",
        "test",
        DAG,
        DAY,
        "-c",
        json.dumps({"table": str(table.name)}),
    )


def mark_done(settings: Settings, table: TableInfo, *spec: str) -> int:
    """``hcat-notify mark-done`` in a process of its own; the event id."""
    done = run_cli(settings, "mark-done", str(table.name), *spec)
    assert done.returncode == 0, done.stderr
    found = re.search(r"recorded as event (\d+)", done.stdout)
    assert found is not None, done.stdout
    return int(found.group(1))


def test_deferred_sensor_succeeds_when_the_done_arrives(
    airflow_home: AirflowHome, hcat_settings: Settings, clicks_table: TableInfo, relay
):
    run = dags_test(airflow_home, hcat_settings, clicks_table, HCAT_EXAMPLE_WAIT_SECONDS="600")
    # The task deferred and its trigger subscribed; only now is the done sent.
    run.wait_for_line("hcat wait subscribed")
    event_id = mark_done(hcat_settings, clicks_table, SPEC)

    assert run.finish() == 0, run.output[-4000:]
    assert f"loading {clicks_table.name} {SPEC} (done by event {event_id})" in run.output
    assert airflow_home.task_states(DAG) == {"clicks_done": "success", "load": "success"}
    # It really deferred: the metadata database saw it pause and its trigger.
    assert airflow_home.transitions(DAG, "clicks_done") == [
        "running",
        "deferred",
        "running",
        "success",
    ]
    [(classpath, kwargs)] = airflow_home.triggers()
    assert classpath == "hcat_notify.airflow.triggers.HcatMarkSetDoneTrigger"
    assert json.loads(kwargs)["spec"] == {"datestamp": "20110228"}
    assert hcat_settings.consumer_password not in kwargs
    assert hcat_settings.consumer_password not in run.output


def test_sensor_succeeds_at_once_when_the_done_came_first(
    airflow_home: AirflowHome, hcat_settings: Settings, clicks_table: TableInfo, relay
):
    # A done for the whole day covers the sensor's spec (and any narrower one).
    event_id = mark_done(hcat_settings, clicks_table, SPEC)

    run = dags_test(airflow_home, hcat_settings, clicks_table, HCAT_EXAMPLE_WAIT_SECONDS="600")

    assert run.finish() == 0, run.output[-4000:]
    assert f"(done by event {event_id})" in run.output
    assert airflow_home.task_states(DAG) == {"clicks_done": "success", "load": "success"}
    assert airflow_home.transitions(DAG, "clicks_done") == ["running", "success"]
    assert airflow_home.triggers() == []


def test_sensor_fails_at_its_timeout_without_a_covering_done(
    airflow_home: AirflowHome, hcat_settings: Settings, clicks_table: TableInfo, relay
):
    # Neither a narrower done (one region of the day) nor another day covers it.
    mark_done(hcat_settings, clicks_table, SPEC, "region=us")
    mark_done(hcat_settings, clicks_table, "datestamp=20110301")

    run = dags_test(airflow_home, hcat_settings, clicks_table, HCAT_EXAMPLE_WAIT_SECONDS="8")

    assert run.finish() != 0
    assert "Sensor has timed out" in run.output
    assert airflow_home.task_states(DAG) == {"clicks_done": "failed", "load": "upstream_failed"}
    assert airflow_home.transitions(DAG, "clicks_done") == [
        "running",
        "deferred",
        "running",
        "failed",
    ]


def test_bad_input_fails_the_task_at_once(
    airflow_home: AirflowHome, hcat_settings: Settings, clicks_table
):
    home = AirflowHome(airflow_home.home, TEST_DAGS)
    run = AirflowProcess(
        home,
        home.env(hcat_settings),
        "dags",
        "test",
        "hcat_bad_input",
        DAY,
        "-c",
        json.dumps({"table": str(clicks_table.name)}),
    )

    # Both sensors have an hour's timeout and three retries; the run ends without them.
    assert run.finish(timeout=300) != 0
    assert home.task_states("hcat_bad_input") == {
        "unknown_key": "failed",
        "unknown_table": "failed",
    }
    for task in ("unknown_key", "unknown_table"):
        assert home.transitions("hcat_bad_input", task) == ["running", "failed"]
    assert re.search(r"unknown_key: .*hour", run.output), run.output[-4000:]
    assert re.search(r"unknown_table: .*nosuch\.table", run.output), run.output[-4000:]
    assert "Sensor has timed out" not in run.output
