"""The ``hcat_notify`` Airflow connection type: where the broker, the catalog or the HTTP
API are, and the consumer principal's credentials.

A connection is layered over the hcat-notify settings (file → ``HCAT_NOTIFY_*``
environment), so a deployment that already configures hcat-notify on its Airflow hosts
needs no connection at all; ``conn_id=None`` uses those settings alone. Fields:

==========  ================================================================
host, port  the broker (``stomp://host:port``) unless ``extra.broker_url`` lists several
login       the consumer (read-only) principal
password    its password (never logged, never part of a serialized trigger)
extra       JSON: ``broker_url``, ``db_url``, ``api_url``, ``topic_prefix``,
            ``topic_strategy``, ``broker_timeout``, ``api_timeout``, ``home`` — any
            hcat-notify setting by its field name
==========  ================================================================

Triggers carry only the connection id; the triggerer resolves it when the trigger runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from hcat_notify.config import DEFAULT_BROKER_PORT, Settings, load_settings
from hcat_notify.errors import ConfigError

__all__ = ["DEFAULT_CONN_ID", "HcatNotifyHook", "settings_from_connection"]

DEFAULT_CONN_ID = "hcat_notify_default"


def settings_from_connection(
    *,
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any],
) -> Settings:
    """Settings from a connection's fields layered over the file and environment.

    Raises:
        ConfigError: an unknown or invalid setting in ``extra`` (named, value withheld).
    """
    overrides: dict[str, Any] = dict(extra)
    if host and "broker_url" not in overrides:
        overrides["broker_url"] = f"stomp://{host}:{port or DEFAULT_BROKER_PORT}"
    if login:
        overrides["consumer_user"] = login
    if password:
        overrides["consumer_password"] = password
    return load_settings(**overrides)


class HcatNotifyHook(BaseHook):
    """Resolves an ``hcat_notify`` connection into hcat-notify :class:`Settings`.

    Args:
        hcat_notify_conn_id: the connection; None (or the default id when no such
            connection exists) uses the hcat-notify settings file and environment.
    """

    conn_name_attr = "hcat_notify_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "hcat_notify"
    hook_name = "hcat-notify"

    _UI_FIELDS: ClassVar[dict[str, Any]] = {
        "hidden_fields": ["schema"],
        "relabeling": {"host": "Broker host", "login": "Consumer user"},
        "placeholders": {
            "host": "127.0.0.1",
            "port": str(DEFAULT_BROKER_PORT),
            "login": "hcat-reader",
            "extra": '{"db_url": "postgresql+psycopg://...", "api_url": "http://..."}',
        },
    }

    def __init__(self, hcat_notify_conn_id: str | None = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.hcat_notify_conn_id = hcat_notify_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """How Airflow's connection form shows this type."""
        return cls._UI_FIELDS

    def get_conn(self) -> Settings:
        """The settings for this hook's connection."""
        return self.get_settings()

    def get_settings(self) -> Settings:
        """The settings for this hook's connection (blocking: in a worker)."""
        conn_id = self.hcat_notify_conn_id
        if conn_id is None:
            return load_settings()
        try:
            conn = self.get_connection(conn_id)
        except AirflowNotFoundException:
            return self._missing(conn_id)
        return _settings_of(conn, conn_id)

    async def aget_settings(self) -> Settings:
        """The settings for this hook's connection (in the triggerer's event loop)."""
        conn_id = self.hcat_notify_conn_id
        if conn_id is None:
            return load_settings()
        try:
            conn = await self.aget_connection(conn_id)
        except AirflowNotFoundException:
            return self._missing(conn_id)
        return _settings_of(conn, conn_id)

    @staticmethod
    def _missing(conn_id: str) -> Settings:
        if conn_id == DEFAULT_CONN_ID:
            return load_settings()  # no connection: the hcat-notify settings alone
        raise ConfigError(f"no Airflow connection {conn_id!r} (of type hcat_notify)")


def _settings_of(conn: Any, conn_id: str) -> Settings:
    try:
        extra = conn.extra_dejson
    except Exception as exc:  # Airflow raises several kinds for bad JSON
        raise ConfigError(f"connection {conn_id!r}: extra is not a JSON object") from exc
    try:
        return settings_from_connection(
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            extra=extra if isinstance(extra, Mapping) else {},
        )
    except ConfigError as exc:
        raise ConfigError(f"connection {conn_id!r}: {exc}") from exc
