"""hcat-notify: partition notifications for Hive-style partitioned tables.

Spark writers register partitions and mark sets done; the catalog records them with
their messages in one transaction; a relay publishes the messages to ActiveMQ topics.

Every name below is loaded on first use (PEP 562): ``import hcat_notify`` costs neither
SQLAlchemy nor stomp.py until a catalog, a relay or a consumer is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.errors import (
    ApiAuthError,
    ApiError,
    ApiUnavailableError,
    BrokerAuthError,
    BrokerCredentialsError,
    BrokerError,
    BrokerRejectedError,
    BrokerTimeoutError,
    BrokerUnavailableError,
    ConcurrentWriteError,
    ConfigError,
    ConflictError,
    HcatNotifyError,
    InvalidIdentifierError,
    InvalidInputError,
    InvalidSpecError,
    PartitionExistsError,
    StoreError,
    StoreUnavailableError,
    SubscriberInUseError,
    SubscriberTakenOverError,
    TableExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)
from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.api.client import ApiClient
    from hcat_notify.config import Settings, load_settings
    from hcat_notify.consumer import Notification, NotificationConsumer, Source
    from hcat_notify.model.events import EventType
    from hcat_notify.model.names import TableName
    from hcat_notify.model.specs import (
        DEFAULT_PARTITION_NAME,
        PartitionSpec,
        escape_path_name,
        unescape_path_name,
    )
    from hcat_notify.model.topics import TopicStrategy, destination_for, resolve_topic
    from hcat_notify.relay import Relay, RelayConfig
    from hcat_notify.store import (
        DEFAULT_RETENTION,
        Catalog,
        CommitRecord,
        JournalEntry,
        JournalState,
        NewPartition,
        PartitionInfo,
        RetainedDone,
        TableInfo,
        WriteMode,
    )
    from hcat_notify.writer import send_mark_set_done

__all__ = [
    "DEFAULT_PARTITION_NAME",
    "DEFAULT_RETENTION",
    "ApiAuthError",
    "ApiClient",
    "ApiError",
    "ApiUnavailableError",
    "BrokerAuthError",
    "BrokerCredentialsError",
    "BrokerError",
    "BrokerRejectedError",
    "BrokerTimeoutError",
    "BrokerUnavailableError",
    "Catalog",
    "CommitRecord",
    "ConcurrentWriteError",
    "ConfigError",
    "ConflictError",
    "EventType",
    "HcatNotifyError",
    "InvalidIdentifierError",
    "InvalidInputError",
    "InvalidSpecError",
    "JournalEntry",
    "JournalState",
    "NewPartition",
    "Notification",
    "NotificationConsumer",
    "PartitionExistsError",
    "PartitionInfo",
    "PartitionSpec",
    "Relay",
    "RelayConfig",
    "RetainedDone",
    "Settings",
    "Source",
    "StoreError",
    "StoreUnavailableError",
    "SubscriberInUseError",
    "SubscriberTakenOverError",
    "TableExistsError",
    "TableInfo",
    "TableName",
    "TableNotFoundError",
    "TopicStrategy",
    "UnknownPartitionKeyError",
    "WriteMode",
    "destination_for",
    "escape_path_name",
    "load_settings",
    "resolve_topic",
    "send_mark_set_done",
    "unescape_path_name",
]

_STORE = "hcat_notify.store"
_SPECS = "hcat_notify.model.specs"
_TOPICS = "hcat_notify.model.topics"
_CONSUMER = "hcat_notify.consumer"

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "ApiClient": "hcat_notify.api.client",
        "Settings": "hcat_notify.config",
        "load_settings": "hcat_notify.config",
        "Notification": _CONSUMER,
        "NotificationConsumer": _CONSUMER,
        "Source": _CONSUMER,
        "EventType": "hcat_notify.model.events",
        "TableName": "hcat_notify.model.names",
        "DEFAULT_PARTITION_NAME": _SPECS,
        "PartitionSpec": _SPECS,
        "escape_path_name": _SPECS,
        "unescape_path_name": _SPECS,
        "TopicStrategy": _TOPICS,
        "destination_for": _TOPICS,
        "resolve_topic": _TOPICS,
        "Relay": "hcat_notify.relay",
        "RelayConfig": "hcat_notify.relay",
        **dict.fromkeys(
            [
                "DEFAULT_RETENTION",
                "Catalog",
                "CommitRecord",
                "JournalEntry",
                "JournalState",
                "NewPartition",
                "PartitionInfo",
                "RetainedDone",
                "TableInfo",
                "WriteMode",
            ],
            _STORE,
        ),
        "send_mark_set_done": "hcat_notify.writer",
    },
)
