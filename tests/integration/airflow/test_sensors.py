"""The sensors' own paths outside ``airflow dags test``: waiting in the worker
(``deferrable=False``) with a real broker, a SQLite catalog and a relay process."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import TableInfo
from hcat_notify.writer import send_mark_set_done
from tests.integration.airflow.test_triggers import airflow_connection, logged

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

__all__ = ["airflow_connection", "logged"]  # fixtures shared with test_triggers


def test_non_deferrable_sensor_waits_subscribed_in_the_worker(
    hcat_settings: Settings, clicks_table: TableInfo, relay, airflow_connection: str, logged
):
    from hcat_notify.airflow import HcatMarkSetDoneSensor

    sensor = HcatMarkSetDoneSensor(
        task_id="clicks_done",
        table=str(clicks_table.name),
        spec={"datestamp": "20110228", "region": "us"},
        deferrable=False,
        timeout=300,
        conn_id=airflow_connection,
    )
    results: list[Any] = []
    subscribed = logged("hcat wait subscribed")
    worker = threading.Thread(target=lambda: results.append(sensor.execute({})), daemon=True)
    worker.start()
    assert subscribed.wait(60), "the sensor did not subscribe"
    # A done for the whole day covers the sensor's narrower spec.
    event_id = send_mark_set_done(
        str(clicks_table.name), {"datestamp": "20110228"}, settings=hcat_settings
    )
    worker.join(120)

    assert not worker.is_alive()
    [done] = results
    assert done["event_id"] == event_id
    assert done["spec"] == "datestamp=20110228"
    assert done["wanted"] == "datestamp=20110228/region=us"
