"""The relay group: members that publish the outbox, each the topics of its buckets, in
event-id order per topic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.relay.config import RelayConfig
    from hcat_notify.relay.publisher import Relay, RelayStats

__all__ = ["Relay", "RelayConfig", "RelayStats"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "RelayConfig": "hcat_notify.relay.config",
        "Relay": "hcat_notify.relay.publisher",
        "RelayStats": "hcat_notify.relay.publisher",
    },
)
