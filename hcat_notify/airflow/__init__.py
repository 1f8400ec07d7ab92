"""Apache Airflow integration (the ``[airflow]`` extra, Airflow 3): waits without polling.

* :class:`HcatMarkSetDoneSensor`, :class:`HcatPartitionSensor` — check once, then defer
  to :class:`HcatMarkSetDoneTrigger` / :class:`HcatPartitionTrigger` (or wait subscribed
  in the worker with ``deferrable=False``);
* :class:`HcatEventTrigger` — a ``BaseEventTrigger`` for asset watchers: a durable
  subscriber whose notifications become asset events;
* :class:`HcatNotifyHook` — the ``hcat_notify`` connection type.

Names load on first use: importing this package does not import Airflow, and nothing
else in ``hcat_notify`` imports it. Errors are :class:`~hcat_notify.HcatNotifyError`
subclasses, turned into Airflow's task failures at the sensors. The design is in
docs/airflow.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.airflow.hooks import HcatNotifyHook
    from hcat_notify.airflow.provider import get_provider_info
    from hcat_notify.airflow.sensors import HcatMarkSetDoneSensor, HcatPartitionSensor
    from hcat_notify.airflow.triggers import (
        HcatEventTrigger,
        HcatMarkSetDoneTrigger,
        HcatPartitionTrigger,
    )

__all__ = [
    "HcatEventTrigger",
    "HcatMarkSetDoneSensor",
    "HcatMarkSetDoneTrigger",
    "HcatNotifyHook",
    "HcatPartitionSensor",
    "HcatPartitionTrigger",
    "get_provider_info",
]

_TRIGGERS = "hcat_notify.airflow.triggers"
_SENSORS = "hcat_notify.airflow.sensors"

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "HcatNotifyHook": "hcat_notify.airflow.hooks",
        "get_provider_info": "hcat_notify.airflow.provider",
        "HcatMarkSetDoneSensor": _SENSORS,
        "HcatPartitionSensor": _SENSORS,
        "HcatEventTrigger": _TRIGGERS,
        "HcatMarkSetDoneTrigger": _TRIGGERS,
        "HcatPartitionTrigger": _TRIGGERS,
    },
)
