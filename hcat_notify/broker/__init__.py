"""The broker client: a STOMP connection with deadlines, error translation and back-off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.broker.backoff import Backoff
    from hcat_notify.broker.connection import (
        DEFAULT_HEARTBEATS,
        HEARTBEAT_TIMEOUT,
        BrokerConnection,
        ReceivedMessage,
        consumer_connection,
        publisher_connection,
    )
    from hcat_notify.broker.errors import BrokerFault, classify

__all__ = [
    "DEFAULT_HEARTBEATS",
    "HEARTBEAT_TIMEOUT",
    "Backoff",
    "BrokerConnection",
    "BrokerFault",
    "ReceivedMessage",
    "classify",
    "consumer_connection",
    "publisher_connection",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        **dict.fromkeys(__all__, "hcat_notify.broker.connection"),
        "Backoff": "hcat_notify.broker.backoff",
        "BrokerFault": "hcat_notify.broker.errors",
        "classify": "hcat_notify.broker.errors",
    },
)
