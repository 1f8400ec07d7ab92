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
    HistoryGoneError,
    InvalidIdentifierError,
    InvalidInputError,
    InvalidRuleError,
    InvalidSpecError,
    LinkInPartitionError,
    LocationNotFoundError,
    LocationOutsideWarehouseError,
    PartitionExistsError,
    PartitionNotFoundError,
    StoreError,
    StoreUnavailableError,
    SubscriberInUseError,
    SubscriberTakenOverError,
    TableDroppedError,
    TableExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
    UnsafeDeleteError,
    UnsafeMoveError,
)
from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.api.client import ApiClient
    from hcat_notify.config import Settings, load_settings
    from hcat_notify.consumer import Notification, NotificationConsumer, Source
    from hcat_notify.files import (
        FileStat,
        TableLocation,
        is_hidden,
        list_data_files,
        path_exists,
        split_location,
        storage_location,
    )
    from hcat_notify.lifecycle import (
        Discovery,
        Purge,
        discover_partitions,
        drop_partitions,
        drop_table,
        reason_to_keep,
        register_partitions,
    )
    from hcat_notify.model.changes import ANNOUNCE_PROPERTY, AnnounceMode
    from hcat_notify.model.completeness import DoneReason, OnDeadline, SetRule, parse_rule
    from hcat_notify.model.events import EventType
    from hcat_notify.model.names import TableName, staging_entry_id, validate_job_id
    from hcat_notify.model.specs import (
        DEFAULT_PARTITION_NAME,
        PartitionSpec,
        escape_path_name,
        unescape_path_name,
    )
    from hcat_notify.model.topics import (
        TOPIC_NAME_PROPERTY,
        TopicStrategy,
        destination_for,
        resolve_topic,
    )
    from hcat_notify.relay import Relay, RelayConfig
    from hcat_notify.safe_delete import (
        OpenedDir,
        TreeEntry,
        list_tree,
        open_below,
        remove_tree,
        warehouse_bases,
    )
    from hcat_notify.safe_move import (
        move_below,
        open_dir_below,
        remove_empty_below,
        stat_below,
    )
    from hcat_notify.store import (
        DEFAULT_RETENTION,
        Catalog,
        CommitRecord,
        DroppedTable,
        JournalEntry,
        JournalState,
        NewPartition,
        PartitionInfo,
        Registration,
        RetainedDone,
        RuleRecord,
        SetReport,
        TableInfo,
        WriteMode,
        table_definition,
    )
    from hcat_notify.warehouse import Warehouse
    from hcat_notify.writer import expect_sets, send_mark_set_done

__all__ = [
    "ANNOUNCE_PROPERTY",
    "DEFAULT_PARTITION_NAME",
    "DEFAULT_RETENTION",
    "TOPIC_NAME_PROPERTY",
    "AnnounceMode",
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
    "Discovery",
    "DoneReason",
    "DroppedTable",
    "EventType",
    "FileStat",
    "HcatNotifyError",
    "HistoryGoneError",
    "InvalidIdentifierError",
    "InvalidInputError",
    "InvalidRuleError",
    "InvalidSpecError",
    "JournalEntry",
    "JournalState",
    "LinkInPartitionError",
    "LocationNotFoundError",
    "LocationOutsideWarehouseError",
    "NewPartition",
    "Notification",
    "NotificationConsumer",
    "OnDeadline",
    "OpenedDir",
    "PartitionExistsError",
    "PartitionInfo",
    "PartitionNotFoundError",
    "PartitionSpec",
    "Purge",
    "Registration",
    "Relay",
    "RelayConfig",
    "RetainedDone",
    "RuleRecord",
    "SetReport",
    "SetRule",
    "Settings",
    "Source",
    "StoreError",
    "StoreUnavailableError",
    "SubscriberInUseError",
    "SubscriberTakenOverError",
    "TableDroppedError",
    "TableExistsError",
    "TableInfo",
    "TableLocation",
    "TableName",
    "TableNotFoundError",
    "TopicStrategy",
    "TreeEntry",
    "UnknownPartitionKeyError",
    "UnsafeDeleteError",
    "UnsafeMoveError",
    "Warehouse",
    "WriteMode",
    "destination_for",
    "discover_partitions",
    "drop_partitions",
    "drop_table",
    "escape_path_name",
    "expect_sets",
    "is_hidden",
    "list_data_files",
    "list_tree",
    "load_settings",
    "move_below",
    "open_below",
    "open_dir_below",
    "parse_rule",
    "path_exists",
    "reason_to_keep",
    "register_partitions",
    "remove_empty_below",
    "remove_tree",
    "resolve_topic",
    "send_mark_set_done",
    "split_location",
    "staging_entry_id",
    "stat_below",
    "storage_location",
    "table_definition",
    "unescape_path_name",
    "validate_job_id",
    "warehouse_bases",
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
        "ANNOUNCE_PROPERTY": "hcat_notify.model.changes",
        **dict.fromkeys(
            [
                "Discovery",
                "Purge",
                "discover_partitions",
                "drop_partitions",
                "drop_table",
                "reason_to_keep",
                "register_partitions",
            ],
            "hcat_notify.lifecycle",
        ),
        "AnnounceMode": "hcat_notify.model.changes",
        **dict.fromkeys(
            ["DoneReason", "OnDeadline", "SetRule", "parse_rule"], "hcat_notify.model.completeness"
        ),
        **dict.fromkeys(
            [
                "FileStat",
                "TableLocation",
                "is_hidden",
                "list_data_files",
                "path_exists",
                "split_location",
                "storage_location",
            ],
            "hcat_notify.files",
        ),
        **dict.fromkeys(
            ["TableName", "staging_entry_id", "validate_job_id"], "hcat_notify.model.names"
        ),
        **dict.fromkeys(
            [
                "OpenedDir",
                "TreeEntry",
                "list_tree",
                "open_below",
                "remove_tree",
                "warehouse_bases",
            ],
            "hcat_notify.safe_delete",
        ),
        **dict.fromkeys(
            ["move_below", "open_dir_below", "remove_empty_below", "stat_below"],
            "hcat_notify.safe_move",
        ),
        "Warehouse": "hcat_notify.warehouse",
        "DEFAULT_PARTITION_NAME": _SPECS,
        "PartitionSpec": _SPECS,
        "escape_path_name": _SPECS,
        "unescape_path_name": _SPECS,
        "TopicStrategy": _TOPICS,
        "TOPIC_NAME_PROPERTY": _TOPICS,
        "destination_for": _TOPICS,
        "resolve_topic": _TOPICS,
        "Relay": "hcat_notify.relay",
        "RelayConfig": "hcat_notify.relay",
        **dict.fromkeys(
            [
                "DEFAULT_RETENTION",
                "Catalog",
                "CommitRecord",
                "DroppedTable",
                "JournalEntry",
                "JournalState",
                "NewPartition",
                "PartitionInfo",
                "Registration",
                "RetainedDone",
                "RuleRecord",
                "SetReport",
                "TableInfo",
                "WriteMode",
                "table_definition",
            ],
            _STORE,
        ),
        "expect_sets": "hcat_notify.writer",
        "send_mark_set_done": "hcat_notify.writer",
    },
)
