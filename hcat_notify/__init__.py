"""hcat-notify: partition notifications for Hive-style partitioned tables.

Spark writers register partitions and mark sets done; the catalog records them with
their messages in one transaction; a relay publishes the messages to ActiveMQ topics.
"""

from hcat_notify.consumer import Notification, NotificationConsumer, Source
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerError,
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
    TableExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)
from hcat_notify.names import TableName
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.settings import Settings, TopicStrategy, load_settings
from hcat_notify.specs import PartitionSpec
from hcat_notify.store import Catalog, NewPartition, PartitionInfo, RetainedDone, TableInfo
from hcat_notify.topics import resolve_topic
from hcat_notify.writer import send_mark_set_done

__all__ = [
    "BrokerAuthError",
    "BrokerError",
    "BrokerTimeoutError",
    "BrokerUnavailableError",
    "Catalog",
    "ConcurrentWriteError",
    "ConfigError",
    "ConflictError",
    "HcatNotifyError",
    "InvalidIdentifierError",
    "InvalidInputError",
    "InvalidSpecError",
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
    "TableExistsError",
    "TableInfo",
    "TableName",
    "TableNotFoundError",
    "TopicStrategy",
    "UnknownPartitionKeyError",
    "load_settings",
    "resolve_topic",
    "send_mark_set_done",
]
