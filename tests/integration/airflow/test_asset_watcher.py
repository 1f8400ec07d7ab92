"""The example asset-scheduled DAG with a real ``airflow triggerer``: every done of the
table becomes one asset event, in order, across a restart of the triggerer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog
from tests.integration.airflow.support import AirflowHome, AirflowProcess, run_airflow
from tests.integration.airflow.test_sensor_dag import mark_done
from tests.integration.delivery import CliProcess

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

TABLE = "web.clicks"  # the example DAG's table
SUBSCRIBER = "airflow-clicks-asset"


@pytest.fixture
def web_clicks(hcat_settings: Settings) -> Iterator[object]:
    """The example's table in this test's catalog, and a relay publishing it."""
    with Catalog.open(hcat_settings) as catalog:
        info = catalog.create_table(
            TABLE, location="/data/web/clicks", partition_keys=["datestamp", "region"]
        )
    process = CliProcess(hcat_settings, "relay")
    try:
        yield info
    finally:
        process.proc.terminate()
        process.finish(timeout=60)


def asset_events(home: AirflowHome) -> list[dict[str, Any]]:
    rows = home.query("SELECT extra FROM asset_event ORDER BY id")
    return [json.loads(extra)["payload"] for (extra,) in rows]


def wait_for_events(home: AirflowHome, count: int, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = asset_events(home)
        if len(events) >= count:
            return events
        time.sleep(0.5)
    return asset_events(home)


def start_triggerer(home: AirflowHome, env: dict[str, str]) -> AirflowProcess:
    triggerer = AirflowProcess(home, env, "triggerer")
    triggerer.wait_for_line(f"hcat event stream subscriber={SUBSCRIBER}", timeout=300)
    return triggerer


def test_each_done_becomes_one_asset_event_across_a_triggerer_restart(
    airflow_home: AirflowHome, hcat_settings: Settings, web_clicks
):
    env = airflow_home.env(hcat_settings, AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False")
    # Parse the examples: the asset, its watcher and the trigger's row.
    run_airflow(airflow_home, env, "dags", "reserialize")
    [(classpath, kwargs)] = airflow_home.triggers()
    assert classpath == "hcat_notify.airflow.triggers.HcatEventTrigger"
    assert json.loads(kwargs)["subscriber"] == SUBSCRIBER
    assert hcat_settings.consumer_password not in kwargs

    triggerer = start_triggerer(airflow_home, env)
    try:
        ids = [mark_done(hcat_settings, web_clicks, f"datestamp=2011030{d}") for d in (1, 2, 3)]
        first = wait_for_events(airflow_home, 3)
    finally:
        triggerer.stop(timeout=120)
    assert [e["event_id"] for e in first] == ids
    assert [e["spec"] for e in first] == [f"datestamp=2011030{d}" for d in (1, 2, 3)]
    assert {e["table"] for e in first} == {TABLE}
    assert {e["table_location"] for e in first} == {"/data/web/clicks"}
    # The asset's DAG is queued to run.
    assert airflow_home.query("SELECT target_dag_id FROM asset_dag_run_queue") == [
        ("hcat_clicks_by_done",)
    ]

    # Dones while no triggerer runs, then one after it is back.
    ids += [mark_done(hcat_settings, web_clicks, f"datestamp=2011030{d}") for d in (4, 5)]
    triggerer = start_triggerer(airflow_home, env)
    try:
        ids.append(mark_done(hcat_settings, web_clicks, "datestamp=20110306"))
        wait_for_events(airflow_home, 6)
    finally:
        triggerer.stop(timeout=120)
    # Each done exactly once, in order: none lost, none repeated.
    assert [e["event_id"] for e in asset_events(airflow_home)] == ids
