"""What Airflow's providers manager learns about hcat-notify (entry point
``apache_airflow_provider``): the ``hcat_notify`` connection type. Imports nothing."""

from __future__ import annotations

from typing import Any

__all__ = ["get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    """The provider metadata Airflow reads at start-up."""
    return {
        "package-name": "hcat-notify",
        "name": "hcat-notify",
        "description": "Partition notifications: sensors, triggers and asset watchers "
        "that wait for hcat-notify messages instead of polling.",
        "versions": ["0.1.0"],
        "connection-types": [
            {
                "connection-type": "hcat_notify",
                "hook-class-name": "hcat_notify.airflow.hooks.HcatNotifyHook",
            }
        ],
    }
