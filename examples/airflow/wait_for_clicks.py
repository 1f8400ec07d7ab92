"""Wait for a day of web.clicks to be marked done, then load it: no polling.

``HcatMarkSetDoneSensor`` checks the catalog once; if the day is not done yet it defers
to a trigger (the worker slot is freed) that subscribes to the table's topic and fires
when a MARK_SET_DONE covering ``datestamp={{ ds_nodash }}`` arrives — a done for the
whole day covers it, whatever the other partition keys.

The table comes from the run's params (``airflow dags test hcat_wait_for_clicks
2011-02-28 -c '{"table": "web.clicks"}'``); where the broker and the catalog are comes
from the ``hcat_notify_default`` connection or, without one, the hcat-notify settings
(``HCAT_NOTIFY_*`` environment, ``hcat-notify.toml``) of the worker and the triggerer.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from hcat_notify.airflow import HcatMarkSetDoneSensor

# How long to wait for the done before failing the task (the sensor's timeout).
WAIT_TIMEOUT = timedelta(seconds=float(os.environ.get("HCAT_EXAMPLE_WAIT_SECONDS", "21600")))

with DAG(
    dag_id="hcat_wait_for_clicks",
    schedule="@daily",
    start_date=datetime(2011, 2, 1),
    catchup=False,
    params={"table": Param("web.clicks", type="string")},
    tags=["hcat-notify"],
):
    clicks_done = HcatMarkSetDoneSensor(
        task_id="clicks_done",
        table="{{ params.table }}",
        spec={"datestamp": "{{ ds_nodash }}"},
        deferrable=True,
        timeout=WAIT_TIMEOUT,
    )

    @task
    def load(done: dict[str, Any]) -> str:
        # The sensor returns the done: its table, spec and event id.
        print(f"loading {done['table']} {done['wanted']} (done by event {done['event_id']})")
        return str(done["wanted"])

    load(clicks_done.output)
