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


def test_a_sensor_for_generation_two_passes_over_the_first_done(
    hcat_settings: Settings, clicks_table: TableInfo, relay, airflow_connection: str, logged
):
    """A table with a completeness rule: its set is done (generation 1) before the sensor
    starts; ``min_generation=2`` waits on, subscribed, until an extra part changes it."""
    from hcat_notify.airflow import HcatMarkSetDoneSensor
    from hcat_notify.store import Catalog, NewPartition

    table = str(clicks_table.name)

    def add(catalog: Catalog, region: str) -> None:
        values = {"datestamp": "20110228", "region": region}
        catalog.add_partitions(table, [NewPartition(values, f"/data/clicks/{region}", 1, 1)])

    with Catalog.open(hcat_settings) as catalog:
        catalog.expect(table, set_keys="datestamp", parts=["region=us,eu"])
        add(catalog, "us")
        add(catalog, "eu")  # done, generation 1
        sensor = HcatMarkSetDoneSensor(
            task_id="clicks_changed",
            table=table,
            spec={"datestamp": "20110228"},
            deferrable=False,
            timeout=300,
            conn_id=airflow_connection,
            min_generation=2,
        )
        results: list[Any] = []
        subscribed = logged("hcat wait subscribed")
        worker = threading.Thread(target=lambda: results.append(sensor.execute({})), daemon=True)
        worker.start()
        assert subscribed.wait(60), "the sensor did not subscribe"
        assert results == []
        add(catalog, "apac")  # a part after the done: generation 2
        worker.join(120)

    assert not worker.is_alive()
    [done] = results
    assert (done["event"], done["generation"], done["reason"]) == ("MARK_SET_DONE", 2, "changed")
    assert done["spec"] == "datestamp=20110228"
