"""Run a DAG for every day of web.clicks marked done: event-driven scheduling.

The asset ``hcat://web/clicks`` is watched by ``HcatEventTrigger``, which runs in the
triggerer as the durable subscriber ``airflow-clicks-asset``: each MARK_SET_DONE of the
table becomes an asset event (``extra["payload"]`` holds the table, spec, event id,
topic and the table's location)
and starts a run of ``hcat_clicks_by_done``. The catalog keeps the subscriber's
watermarks, so a triggerer restart neither loses nor repeats a done (docs/airflow.md:
what a ``kill -9`` of the triggerer can cost).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from hcat_notify.airflow import HcatEventTrigger

clicks = Asset(
    "hcat://web/clicks",
    watchers=[
        AssetWatcher(
            name="clicks_done",
            trigger=HcatEventTrigger(
                tables=["web.clicks"],
                event_types=["MARK_SET_DONE"],
                subscriber="airflow-clicks-asset",
            ),
        )
    ],
)

with DAG(
    dag_id="hcat_clicks_by_done",
    schedule=[clicks],
    start_date=datetime(2011, 2, 1),
    catchup=False,
    tags=["hcat-notify"],
):

    @task
    def load(**context: Any) -> list[str]:
        specs = []
        for event in context["triggering_asset_events"][clicks]:
            done = event.extra["payload"]  # what HcatEventTrigger fired
            print(f"done: {done['table']} {done['spec']} (event {done['event_id']})")
            specs.append(done["spec"])
        return specs

    load()
