"""The model: names, partition specs, topics, event kinds and wire messages.

Pure values and functions, no I/O: everything else in hcat_notify builds on them.
"""

from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName, validate_identifier
from hcat_notify.model.specs import (
    DEFAULT_PARTITION_NAME,
    PartitionSpec,
    escape_path_name,
    unescape_path_name,
)
from hcat_notify.model.topics import TopicStrategy, destination_for, resolve_topic
from hcat_notify.model.wire import Message, PartitionDetails

__all__ = [
    "DEFAULT_PARTITION_NAME",
    "EventType",
    "Message",
    "PartitionDetails",
    "PartitionSpec",
    "TableName",
    "TopicStrategy",
    "destination_for",
    "escape_path_name",
    "resolve_topic",
    "unescape_path_name",
    "validate_identifier",
]
