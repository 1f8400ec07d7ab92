"""Sensors given bad input: each must fail at once, not at its (hour-long) timeout."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from hcat_notify.airflow import HcatMarkSetDoneSensor, HcatPartitionSensor

with DAG(
    dag_id="hcat_bad_input",
    schedule=None,
    start_date=datetime(2011, 2, 1),
    params={"table": Param("web.clicks", type="string")},
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5)},
):
    HcatMarkSetDoneSensor(
        task_id="unknown_key",
        table="{{ params.table }}",
        spec={"hour": "{{ ds_nodash }}"},
        timeout=timedelta(hours=1),
    )
    HcatPartitionSensor(
        task_id="unknown_table",
        table="nosuch.table",
        spec={"datestamp": "{{ ds_nodash }}"},
        timeout=timedelta(hours=1),
    )
